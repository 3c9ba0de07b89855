"""The group layer's words for ranks out of step: MismatchError, naming the group.

A frame carries its tag (group id, operation number, step) and its
operation's fingerprint. When one does not fit what this rank runs or ran,
or a member left while this rank still waited for it, these build the
error, naming the operation and group the user called; the transport only
reports the fact (:class:`asyncoll._transport.base.Listener`).
"""

from __future__ import annotations

from asyncoll._algorithms.desync import out_of_step
from asyncoll._transport.base import Tag
from asyncoll._wire.frames import Fingerprint
from asyncoll.errors import MismatchError


def desync(rank: int, peer: int, tag: Tag, mine: Fingerprint, theirs: Fingerprint,
           otherwise: str = "") -> MismatchError:
    """The error for a frame of another operation than the one this rank runs
    (``otherwise``: what differs, where the fingerprints do not say)."""
    return out_of_step(rank, peer, tag[1], f"group {tag[0]}", mine, theirs, otherwise)


def stale(rank: int, peer: int, tag: Tag, mine: Fingerprint | None,
          theirs: Fingerprint) -> MismatchError:
    """The error for a frame of an operation this rank completed without it.

    ``mine`` is what this rank ran as that operation, where it still knows:
    the error then names the arguments that differ.
    """
    if mine is not None and mine != theirs:
        return desync(rank, peer, tag, mine, theirs)
    described = ", ".join(f"{k} {v}" for k, v in theirs.fields().items())
    return MismatchError(f"rank {peer} sent data for operation #{tag[1]} of group {tag[0]} "
                         f"({described}), which this rank completed without expecting it: "
                         "the ranks called different collectives, or passed different roots")


def size_mismatch(peer: int, tag: Tag, sent: int, expected: int) -> MismatchError:
    """The error for a frame whose size differs from its receive's."""
    return MismatchError(f"rank {peer} sent {sent} bytes for step {tag[2]} of operation "
                         f"#{tag[1]} on group {tag[0]}; this rank expected {expected}: the "
                         "ranks called collectives of different sizes")


def left_error(peer: int, hostname: str) -> MismatchError:
    """The error of waiting for ``peer`` after it left the job."""
    return MismatchError(f"rank {peer} on {hostname} left the job (destroy_process_group) "
                         "while this rank still expected data from it: the ranks called "
                         "different numbers of collectives")
