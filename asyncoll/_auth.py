"""The job's shared secret, and the challenge-response that proves knowledge of it.

Every coordinator and data connection starts with the accepting side sending
a fresh random nonce; the connecting side answers with
HMAC-SHA256(secret, purpose | nonce | context), which the acceptor checks in
constant time, and sends a nonce of its own, which the acceptor answers the
same way (another purpose), so each side knows the other holds the secret.
The secret itself never crosses the wire, and a recorded answer is useless
for another connection (other nonces). Without a secret configured, the
acceptor asks for nothing, and a connecting side that has one refuses it.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Mapping
from pathlib import Path

from asyncoll.errors import ConfigurationError

#: The environment variable that holds the secret.
TOKEN_VARIABLE = "ASYNCOLL_TOKEN"


def token_from_environment(environ: Mapping[str, str]) -> bytes | None:
    """The secret in ``environ``'s ASYNCOLL_TOKEN, or None when it is unset or empty."""
    value = environ.get(TOKEN_VARIABLE, "")
    return value.encode() if value else None


def read_token_file(path: str) -> bytes:
    """The secret in the file at ``path`` (surrounding whitespace removed).

    Raises:
        ConfigurationError: the file cannot be read or is empty.
    """
    try:
        value = Path(path).read_bytes().strip()
    except OSError as exc:
        raise ConfigurationError(f"cannot read the token file {path}: {exc}") from exc
    if not value:
        raise ConfigurationError(f"the token file {path} is empty; put the shared secret in it")
    return value


def new_nonce() -> str:
    """A fresh random challenge."""
    return secrets.token_hex(16)


def answer(token: bytes, purpose: str, nonce: str, context: str = "") -> str:
    """The response to ``nonce`` that proves knowledge of ``token``."""
    message = f"asyncoll/{purpose}|{nonce}|{context}".encode()
    return hmac.new(token, message, hashlib.sha256).hexdigest()


def verify(token: bytes, purpose: str, nonce: str, response: str, context: str = "") -> bool:
    """Whether ``response`` is the right answer to ``nonce`` (in constant time)."""
    return hmac.compare_digest(answer(token, purpose, nonce, context).encode(),
                               response.encode(errors="replace"))
