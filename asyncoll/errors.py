"""Exceptions raised by asyncoll.

Every error asyncoll raises derives from `AsyncollError`:

```text
AsyncollError
|- ConfigurationError (ValueError)      bad arguments, environment, dtype/op
|- ClosedError                          this rank destroyed what it then used
|- RendezvousError                      coordinator refused or unreachable
|  |- RendezvousTimeoutError (TimeoutError)
|  |- ExcludedError                     an elastic job went on without this process
|  `- AuthenticationError
|- CollectiveError                      an operation did not complete
|  |- PeerLostError                     .rank and .host of the peer lost
|  |- CollectiveTimeoutError (TimeoutError)
|  |  `- MonitoredBarrierError (RuntimeError)  the torch backend's monitored_barrier
|  |- MismatchError                     ranks disagree on what they call
|  |- GroupBrokenError                  sticky: an earlier failure; __cause__ is it
|  |  `- GroupBrokenByPeerLossError     ... that was a lost peer (a PeerLostError too)
|  `- AbortedError                      the group was aborted, here or by a member
`- ProtocolError                        malformed frame or version mismatch
```

Closed is not broken (trio's ClosedResourceError against
BrokenResourceError): ClosedError is a programming error of this rank's,
while the CollectiveErrors come from the outside world. After a peer is lost,
every pending and later operation of a group containing it raises an error
that `except PeerLostError` catches, with the peer's `rank` and `host`.

Errors that cross the control plane travel as a stable string code and a
sentence; `error_from_code` turns them back into these classes, and an
unknown code (from a newer peer) into a RendezvousError. Records that carry
an int instead (a shared-memory arena's control line) hold the code's pinned
number (`error_number`); `code_of_number` reads one back, and an unknown
number into "collective", so a newer peer's error still fails the operation
as a CollectiveError.
"""

from __future__ import annotations

__all__ = [
    "AbortedError",
    "AsyncollError",
    "AuthenticationError",
    "ClosedError",
    "CollectiveError",
    "CollectiveTimeoutError",
    "ConfigurationError",
    "ExcludedError",
    "GroupBrokenByPeerLossError",
    "GroupBrokenError",
    "MismatchError",
    "MonitoredBarrierError",
    "PeerLostError",
    "ProtocolError",
    "RendezvousError",
    "RendezvousTimeoutError",
    "code_of_number",
    "error_code",
    "error_from_code",
    "error_number",
]


class AsyncollError(Exception):
    """Base class of every error asyncoll raises."""


class ConfigurationError(AsyncollError, ValueError):
    """Bad arguments, environment, or a dtype/op combination that cannot work."""


class ClosedError(AsyncollError):
    """This rank destroyed the group or job (destroy_process_group), then used it."""


class RendezvousError(AsyncollError):
    """The coordinator refused this peer or could not be reached."""


class RendezvousTimeoutError(RendezvousError, TimeoutError):
    """The rendezvous (or a coordinator-side agreement) missed its deadline."""


class ExcludedError(RendezvousError):
    """The job's membership changed without this process (an elastic job's reconfigure
    went on without it); it is no longer a member."""


class AuthenticationError(RendezvousError):
    """A connection failed to prove knowledge of the job's shared secret."""


class CollectiveError(AsyncollError):
    """A collective operation did not complete."""


class PeerLostError(CollectiveError):
    """A peer taking part in the operation is gone.

    Attributes:
        rank: the global rank of the lost peer, or -1 when unknown.
        host: the host name of the lost peer, or "" when unknown.
    """

    def __init__(self, message: str, rank: int = -1, host: str = "") -> None:
        super().__init__(message)
        self.rank = rank
        self.host = host


class CollectiveTimeoutError(CollectiveError, TimeoutError):
    """An operation did not complete before its deadline.

    Attributes:
        waiting_for: the global ranks it still waited for when the deadline
            passed (empty where unknown, or where the time went in this rank's work).
        seconds: the deadline, in seconds (0.0 where unknown).
    """

    waiting_for: tuple[int, ...] = ()
    seconds: float = 0.0


class MonitoredBarrierError(CollectiveTimeoutError, RuntimeError):
    """A monitored barrier on the torch backend failed, in gloo's words.

    A RuntimeError too, as what torch raises for gloo's is, so code written
    for gloo catches it.
    """


class MismatchError(CollectiveError):
    """Ranks disagree on what they are calling (members, sizes, dtypes)."""


class GroupBrokenError(CollectiveError):
    """The group failed earlier; `__cause__` is the first failure."""


class GroupBrokenByPeerLossError(GroupBrokenError, PeerLostError):
    """The group broke earlier because a peer was lost; `rank` and `host` name it.

    A GroupBrokenError (sticky; `__cause__` is the first failure) that
    `except PeerLostError` also catches, so code that recovers from a lost
    peer sees the same type whether the loss came during an operation or
    between two.
    """


class AbortedError(CollectiveError):
    """The group was aborted (torch's `ProcessGroup.abort()`, or a `shrink_group` with
    SHRINK_ABORT), here or by another member: its operations fail at once."""


class ProtocolError(AsyncollError):
    """A malformed frame or message, or a protocol version mismatch."""


# Stable codes used on the control plane, and the number each stands as in records
# that carry an int (a shared-memory arena's control line). Pinned: never reuse or
# renumber a code or a number, as old peers and daemons may still send it; a new code
# takes the next number (tests/unit/test_errors.py holds the table as it must stay).
_CODES: dict[str, tuple[int, type[AsyncollError]]] = {
    "configuration": (1, ConfigurationError),
    "rendezvous": (2, RendezvousError),
    "rendezvous_timeout": (3, RendezvousTimeoutError),
    "authentication": (4, AuthenticationError),
    "collective": (5, CollectiveError),
    "peer_lost": (6, PeerLostError),
    "timeout": (7, CollectiveTimeoutError),
    "mismatch": (8, MismatchError),
    "group_broken": (9, GroupBrokenError),
    "protocol": (10, ProtocolError),
    "closed": (11, ClosedError),
    "excluded": (12, ExcludedError),
    "aborted": (13, AbortedError),
}
_CLASSES = {code: cls for code, (_, cls) in _CODES.items()}
_CLASS_TO_CODE = {cls: code for code, cls in _CLASSES.items()}
_NUMBERS = {code: number for code, (number, _) in _CODES.items()}
_BY_NUMBER = {number: code for code, number in _NUMBERS.items()}


def timed_out_words(seconds: float) -> str:
    """What a timeout's message ends with: gloo's words, which torch's callers match on.

    torch's own tests match a timeout with `" (Timed out|closed|timeout) "`
    (distributed_test.py, _test_barrier_timeout) and `"Timed out waiting 1ms"`
    on gloo's "Timed out waiting 1000ms for recv operation to complete".
    """
    return f"Timed out waiting {round(seconds * 1000)}ms"


def broken_by(what: str, first: AsyncollError) -> AsyncollError:
    """The sticky error of a call on `what` after `first` broke it.

    A lost peer's stays a PeerLostError too, naming the rank and its host, so
    `except PeerLostError` catches it whether the loss came during an
    operation or between two. An exclusion from an elastic job stays an
    ExcludedError.
    """
    if isinstance(first, ExcludedError):
        # Not the group's fault, and not mended by a new group: the process must leave.
        return ExcludedError(str(first))
    text = f"{what} failed earlier ({first}); destroy it and create a new one"
    if isinstance(first, PeerLostError):
        return GroupBrokenByPeerLossError(text, rank=first.rank, host=first.host)
    return GroupBrokenError(text)


def error_code(exc_type: type[AsyncollError]) -> str:
    """Return the control-plane code of an asyncoll exception class."""
    for cls in exc_type.__mro__:
        if cls in _CLASS_TO_CODE:
            return _CLASS_TO_CODE[cls]
    return "rendezvous"


def error_number(exc_type: type[AsyncollError]) -> int:
    """The number of an exception class's code (see `error_code`), for binary records."""
    return _NUMBERS[error_code(exc_type)]


def code_of_number(number: int) -> str:
    """The code a number stands for (`error_number`).

    An unknown number (from a newer peer) reads as "collective", so the
    operation still fails, as a CollectiveError.
    """
    return _BY_NUMBER.get(number, "collective")


def error_from_code(code: str, message: str) -> AsyncollError:
    """Build the exception a control-plane error reply stands for.

    An unknown code (from a newer daemon) becomes a plain RendezvousError so
    the message still reaches the user.
    """
    return _CLASSES.get(code, RendezvousError)(message)
