"""The one wording of a desync: two ranks that called the same operation differently.

Every place that finds one (a frame's fingerprint on the transport, a
record's on a group's direct links, a slot's in a shared-memory arena) words
it here, naming where the operation ran.
"""

from __future__ import annotations

from asyncoll._wire.frames import Fingerprint
from asyncoll.errors import MismatchError


def out_of_step(rank: int, peer: int, operation: int, where: str, mine: Fingerprint,
                theirs: Fingerprint, otherwise: str = "") -> MismatchError:
    """The error for rank ``peer`` having run operation #``operation`` of ``where`` (a
    group, say) as ``theirs`` while this rank, ``rank``, ran it as ``mine``.

    ``otherwise`` stands in for the differing fields where the fingerprints agree.
    """
    differences = "; ".join(mine.differences(theirs, rank, peer)) or otherwise
    return MismatchError(f"ranks {rank} and {peer} called operation #{operation} of {where} "
                         f"differently ({differences}): every rank must call the same "
                         "collectives in the same order, with the same arguments")
