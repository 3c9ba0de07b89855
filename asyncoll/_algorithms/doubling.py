"""Recursive-doubling all-reduce: the latency-optimal choice for small arrays.

With p the largest power of two not above n, the first 2 (n - p) members
fold in pairs: each even one hands its data to the odd one after it and
waits for the answer, leaving p active members. In round k each active
member exchanges its whole partial result with the member whose virtual
index differs in bit k and combines the two, so after log2(p) rounds every
active member holds the reduction of everything; the folded members then
get it from their partners. That is log2(p) + 2 latencies instead of the
ring's 2 (n - 1), at the price of sending the whole array each round.

Both members of a pair combine the same two partials in the same order
(the lower virtual index first), so every member gets the same bits.
"""

from __future__ import annotations

import numpy as np

from asyncoll._algorithms.ops import combine, finish
from asyncoll._algorithms.team import Team
from asyncoll.types import ReduceOp


async def recursive_doubling_all_reduce(team: Team, data: np.ndarray, op: ReduceOp,
                                        scratch: np.ndarray) -> None:
    """All-reduce the 1-D contiguous array ``data`` in place.

    ``scratch`` holds at least ``data.size`` elements of ``data``'s dtype.
    """
    n, me = team.size, team.me
    incoming = scratch[:data.size]
    if n == 1 or data.size == 0:
        finish(op, data, n)
        return
    active = 1 << (n.bit_length() - 1)
    folded = n - active
    rounds = active.bit_length() - 1
    last_step = rounds + 1

    if me < 2 * folded:
        if me % 2 == 0:
            team.send(me + 1, 0, data)
            await team.flush()
            await team.recv(me + 1, last_step, data)
            return
        await team.recv(me - 1, 0, incoming)
        combine(op, incoming, data, data)
        virtual = me // 2
    else:
        virtual = me - folded

    def index_of(v: int) -> int:
        return 2 * v + 1 if v < folded else v + folded

    for k in range(rounds):
        partner_virtual = virtual ^ (1 << k)
        partner = index_of(partner_virtual)
        received = team.recv(partner, k + 1, incoming)
        team.send(partner, k + 1, data)
        await received
        await team.flush()  # data is about to change under the send
        if virtual < partner_virtual:
            combine(op, data, incoming, data)
        else:
            combine(op, incoming, data, data)

    finish(op, data, n)
    if me < 2 * folded:
        team.send(me - 1, last_step, data)
        await team.flush()
