"""Exceptions raised by asyncoll.

Every error asyncoll raises derives from :class:`AsyncollError`::

    AsyncollError
    |- ConfigurationError (ValueError)      bad arguments, environment, dtype/op
    |- RendezvousError                      coordinator refused or unreachable
    |  |- RendezvousTimeoutError (TimeoutError)
    |  `- AuthenticationError
    |- CollectiveError                      an operation did not complete
    |  |- PeerLostError                     .rank of the peer lost
    |  |- CollectiveTimeoutError (TimeoutError)
    |  |- MismatchError                     ranks disagree on what they call
    |  `- GroupBrokenError                  sticky: an earlier failure; __cause__ is it
    `- ProtocolError                        malformed frame or version mismatch

Errors that cross the control plane travel as a stable string code and a
sentence; :func:`error_from_code` turns them back into these classes.
"""

from __future__ import annotations

__all__ = [
    "AsyncollError",
    "AuthenticationError",
    "CollectiveError",
    "CollectiveTimeoutError",
    "ConfigurationError",
    "GroupBrokenError",
    "MismatchError",
    "PeerLostError",
    "ProtocolError",
    "RendezvousError",
    "RendezvousTimeoutError",
    "error_code",
    "error_from_code",
]


class AsyncollError(Exception):
    """Base class of every error asyncoll raises."""


class ConfigurationError(AsyncollError, ValueError):
    """Bad arguments, environment, or a dtype/op combination that cannot work."""


class RendezvousError(AsyncollError):
    """The coordinator refused this peer or could not be reached."""


class RendezvousTimeoutError(RendezvousError, TimeoutError):
    """The rendezvous (or a coordinator-side agreement) missed its deadline."""


class AuthenticationError(RendezvousError):
    """A connection failed to prove knowledge of the job's shared secret."""


class CollectiveError(AsyncollError):
    """A collective operation did not complete."""


class PeerLostError(CollectiveError):
    """A peer taking part in the operation is gone.

    Attributes:
        rank: the global rank of the lost peer, or -1 when unknown.
    """

    def __init__(self, message: str, rank: int = -1) -> None:
        super().__init__(message)
        self.rank = rank


class CollectiveTimeoutError(CollectiveError, TimeoutError):
    """An operation did not complete before its deadline."""


class MismatchError(CollectiveError):
    """Ranks disagree on what they are calling (members, sizes, dtypes)."""


class GroupBrokenError(CollectiveError):
    """The group failed earlier; ``__cause__`` is the first failure."""


class ProtocolError(AsyncollError):
    """A malformed frame or message, or a protocol version mismatch."""


# Stable codes used on the control plane. Never reuse or renumber a code:
# old peers and daemons may still send it.
_CODES: dict[str, type[AsyncollError]] = {
    "configuration": ConfigurationError,
    "rendezvous": RendezvousError,
    "rendezvous_timeout": RendezvousTimeoutError,
    "authentication": AuthenticationError,
    "collective": CollectiveError,
    "peer_lost": PeerLostError,
    "timeout": CollectiveTimeoutError,
    "mismatch": MismatchError,
    "group_broken": GroupBrokenError,
    "protocol": ProtocolError,
}
_CLASS_TO_CODE = {cls: code for code, cls in _CODES.items()}


def error_code(exc_type: type[AsyncollError]) -> str:
    """Return the control-plane code of an asyncoll exception class."""
    for cls in exc_type.__mro__:
        if cls in _CLASS_TO_CODE:
            return _CLASS_TO_CODE[cls]
    return "rendezvous"


def error_from_code(code: str, message: str) -> AsyncollError:
    """Build the exception a control-plane error reply stands for.

    An unknown code (from a newer daemon) becomes a plain RendezvousError so
    the message still reaches the user.
    """
    return _CODES.get(code, RendezvousError)(message)
