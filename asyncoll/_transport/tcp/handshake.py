"""The data connection's handshake: who dials, and proof of the job's secret both ways.

The acceptor challenges first (CHALLENGE, a nonce); the dialer answers with
HELLO (its job, an HMAC of the nonce bound to its rank, and a nonce of its
own); the acceptor checks it and answers HELLO_ACK (an HMAC of the dialer's
nonce). Without a secret the proofs are empty and only the job is checked.
Nothing else is read from a connection before its handshake is done.
"""

from __future__ import annotations

from asyncoll import _auth
from asyncoll._tls.handshake import requires_tls_words
from asyncoll._wire.frames import FrameKind, encode_abort, pack_header
from asyncoll.errors import AuthenticationError, ProtocolError

#: The largest CHALLENGE and HELLO_ACK payloads.
MAX_CHALLENGE_BYTES = 64
MAX_ACK_BYTES = 128


def new_nonce() -> str:
    """A fresh challenge."""
    return _auth.new_nonce()


def requires_tls() -> bytes:
    """The ABORT frame a TLS data port sends a peer without TLS (which waits for a
    CHALLENGE) to say why it is refused."""
    words = encode_abort("authentication", requires_tls_words("this rank's data port"))
    return pack_header(FrameKind.ABORT, 0, 0, 0, len(words)) + words


def hello(token: bytes | None, job: str, rank: int, challenge: str) -> tuple[bytes, str]:
    """The dialer's HELLO payload answering ``challenge``, and the nonce it asks back."""
    proof = "" if token is None else _auth.answer(token, "data", challenge, f"{job}|{rank}")
    nonce = new_nonce()
    return f"{job}\n{proof}\n{nonce}".encode(), nonce


def check_hello(token: bytes | None, job: str, payload: bytes, peer: int,
                challenge: str) -> str:
    """Check a dialer's HELLO claiming rank ``peer``; return the nonce it asks back.

    Raises:
        AuthenticationError: the job has a secret and the dialer did not prove it.
        ProtocolError: a peer of another job.
    """
    their_job, _, rest = payload.partition(b"\n")
    proof, _, nonce = rest.decode(errors="replace").partition("\n")
    named = their_job.decode(errors="replace")
    if token is not None and not _auth.verify(token, "data", challenge, proof,
                                              f"{named}|{peer}"):
        raise AuthenticationError(f"a data connection claiming to be rank {peer} did not "
                                  "prove the job's shared secret (ASYNCOLL_TOKEN differs or "
                                  "is missing); closed")
    if their_job != job.encode():
        raise ProtocolError(f"a peer of job {named!r} connected to this peer of job {job!r}")
    return nonce


def ack(token: bytes | None, job: str, peer: int, nonce: str) -> bytes:
    """The acceptor's HELLO_ACK payload: its proof, bound to the dialer's rank.

    Bound to the dialer's rank because this rank may not know its own yet (a
    peer can read the rendezvous reply and dial before this one has).
    """
    return b"" if token is None else _auth.answer(token, "data/acceptor", nonce,
                                                  f"{job}|{peer}").encode()


def check_ack(token: bytes | None, job: str, rank: int, nonce: str, payload: bytes,
              peer: int) -> None:
    """Check the acceptor's HELLO_ACK: a stranger on a peer's address learns nothing.

    Raises:
        AuthenticationError: the job has a secret and the acceptor did not prove it.
    """
    if token is not None and not _auth.verify(token, "data/acceptor", nonce,
                                              payload.decode(errors="replace"),
                                              f"{job}|{rank}"):
        raise AuthenticationError(f"rank {peer}'s data port did not prove the job's shared "
                                  "secret (its ASYNCOLL_TOKEN differs or is missing)")
