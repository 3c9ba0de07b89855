"""Gather, scatter and all-to-all: every block goes straight to where it belongs.

These move distinct data between each pair, so no tree or ring saves
bandwidth; a direct send per pair is optimal in bytes and takes one latency
(the root's link is the bottleneck of gather and scatter whatever is done).
All receives are posted before any send, and all-to-all members send in a
rotated order (member i first to i + 1) so no one member is the target of
everyone's first message.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from asyncoll._algorithms.team import Team


async def direct_gather(team: Team, mine: NDArray[Any], root: int,
                        blocks: Sequence[NDArray[Any]] | None) -> None:
    """Copy every member's ``mine`` into the root member's ``blocks[index]``.

    ``blocks`` is needed on the root only; ``blocks[root]`` may be ``mine``.
    """
    if team.me != root:
        if mine.size:
            team.send(root, 0, mine)
        await team.flush()
        return
    assert blocks is not None  # the caller checked it on the root
    posted = [team.recv(i, 0, block) for i, block in enumerate(blocks)
              if i != root and block.size]
    if blocks[root] is not mine:
        np.copyto(blocks[root], mine)
    for received in posted:
        await received


async def direct_scatter(team: Team, mine: NDArray[Any], root: int,
                         blocks: Sequence[NDArray[Any]] | None) -> None:
    """Copy the root member's ``blocks[index]`` into each member's ``mine``."""
    if team.me != root:
        if mine.size:
            await team.recv(root, 0, mine)
        return
    assert blocks is not None  # the caller checked it on the root
    for i, block in enumerate(blocks):
        if i != root and block.size:
            team.send(i, 0, block)
    if blocks[root] is not mine:
        np.copyto(mine, blocks[root])
    await team.flush()


async def direct_all_to_all(team: Team, outgoing: Sequence[NDArray[Any]],
                            incoming: Sequence[NDArray[Any]]) -> None:
    """Copy each member i's ``outgoing[j]`` into member j's ``incoming[i]``."""
    n, me = team.size, team.me
    posted = [team.recv(i, 0, incoming[i]) for i in range(n) if i != me and incoming[i].size]
    for shift in range(1, n):
        peer = (me + shift) % n
        if outgoing[peer].size:
            team.send(peer, 0, outgoing[peer])
    if incoming[me] is not outgoing[me]:
        np.copyto(incoming[me], outgoing[me])
    for received in posted:
        await received
    await team.flush()
