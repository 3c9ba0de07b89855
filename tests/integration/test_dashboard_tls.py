"""The coordinator's HTTP server under its TLS: HTTPS with its certificate, and with a CA,
a client certificate signed by that CA (issue 43)."""

from __future__ import annotations

import asyncio
import ssl
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from asyncoll._tls.context import TlsSettings, load
from asyncoll.coordinator.server import Coordinator

from . import certificates

pytestmark = [pytest.mark.timeout(60), certificates.NEEDS_OPENSSL]


def status(url: str, context: ssl.SSLContext | None) -> int:
    with urllib.request.urlopen(url, timeout=10, context=context) as reply:
        return int(reply.status)


async def test_the_dashboard_speaks_https_and_asks_for_a_client_certificate(
        tmp_path: Path) -> None:
    certs = certificates.make(tmp_path)
    member = load(TlsSettings(str(certs.cert), str(certs.key), str(certs.ca)))
    coordinator = Coordinator("127.0.0.1", 0, None, member, http_port=0)
    await coordinator.start()
    try:
        assert coordinator.http is not None and coordinator.http.scheme == "https"
        where = f"127.0.0.1:{coordinator.http.port}/api/jobs"
        assert await asyncio.to_thread(status, f"https://{where}", member.client) == 200
        # Without a client certificate (the CA alone), the handshake is refused.
        ca_only = load(TlsSettings(ca=str(certs.ca)), listens=False)
        with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError)):
            await asyncio.to_thread(status, f"https://{where}", ca_only.client)
        # Plain HTTP gets no answer.
        with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
            await asyncio.to_thread(status, f"http://{where}", None)
    finally:
        await coordinator.stop()
