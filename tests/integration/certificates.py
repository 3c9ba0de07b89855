"""Certificates for the TLS tests, made with the openssl command at test time."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

#: The tests need the openssl command to make their certificates.
HAS_OPENSSL = shutil.which("openssl") is not None
NEEDS_OPENSSL = pytest.mark.skipif(not HAS_OPENSSL, reason="needs the openssl command")


@dataclass(frozen=True)
class Certificates:
    """A job's CA and a member certificate it signed; a stranger's CA and certificate."""

    ca: Path
    cert: Path
    key: Path
    other_ca: Path
    stranger_cert: Path
    stranger_key: Path

    def environment(self, *, ca: bool = True) -> dict[str, str]:
        """The ASYNCOLL_TLS_* variables of a member (without the CA: encryption only)."""
        return {"ASYNCOLL_TLS_CERT": str(self.cert), "ASYNCOLL_TLS_KEY": str(self.key),
                "ASYNCOLL_TLS_CA": str(self.ca) if ca else ""}

    def stranger(self) -> dict[str, str]:
        """The variables of a process whose certificate another CA signed."""
        return {"ASYNCOLL_TLS_CERT": str(self.stranger_cert),
                "ASYNCOLL_TLS_KEY": str(self.stranger_key),
                "ASYNCOLL_TLS_CA": str(self.other_ca)}


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _key_and_request(name: str, cwd: Path) -> list[str]:
    return ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", f"{name}.key", "-subj", f"/CN={name}"]


def make(directory: Path) -> Certificates:
    """Make two CAs in ``directory``, and a certificate signed by each."""
    for ca in ("ca", "other-ca"):
        _openssl("req", "-x509", *_key_and_request(ca, directory), "-out", f"{ca}.pem",
                 "-days", "2", cwd=directory)
    for name, ca in (("member", "ca"), ("stranger", "other-ca")):
        _openssl("req", *_key_and_request(name, directory), "-out", f"{name}.csr",
                 cwd=directory)
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey",
                 f"{ca}.key", "-CAcreateserial", "-out", f"{name}.pem", "-days", "2",
                 cwd=directory)
    return Certificates(directory / "ca.pem", directory / "member.pem", directory / "member.key",
                        directory / "other-ca.pem", directory / "stranger.pem",
                        directory / "stranger.key")
