"""The rest of the collective set on N ranks in one loop, against numpy.

Each collective runs at world sizes 1, 2, 3, 4 and 7 and on sub-groups
([0, 2] of 3 and [1, 3, 4] of 5), over several dtypes and counts (0, 1 and
sizes not divisible by the group), with uneven sizes where torch allows
them. Every rank checks its own result; ranks outside a sub-group check
that their arrays were not touched.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from collective_oracle import oracle, rank_input

from asyncoll import ReduceOp
from asyncoll._algorithms import selection
from asyncoll.errors import ConfigurationError
from asyncoll.testing import run_ranks

pytestmark = pytest.mark.timeout(120)

LAYOUTS = [(1, None), (2, None), (3, None), (4, None), (7, None), (3, [0, 2]),
           (5, [1, 3, 4])]
IDS = [f"{n}ranks" if m is None else f"{m}of{n}" for n, m in LAYOUTS]
DTYPES = [np.dtype(d) for d in ("float32", "int64", "uint8", "bool", "complex128", "float16")]
COUNTS = [0, 1, 5, 1001]


@pytest.fixture(autouse=True)
def small_segments(monkeypatch):
    # Rings and chains cut 1001-element arrays into many frames, as large ones are.
    monkeypatch.setattr(selection, "SEGMENT_BYTES", 256)


def values(dtype, count, *key):
    """Distinct deterministic values per key (rank, case...), exact in every dtype."""
    rng = np.random.default_rng([*key, count, dtype.num])
    if dtype.kind == "b":
        return rng.integers(0, 2, count).astype(dtype)
    return rng.integers(0, 9, count).astype(dtype)


async def in_layout(world_size, members, body):
    """Run body(group, rank) on the world or a sub-group; return per-rank results."""

    async def per_rank(world):
        group = world if members is None else await world.new_group(members)
        return await body(group, world.rank)

    return await run_ranks(world_size, per_rank)


def member_list(world_size, members):
    return list(range(world_size)) if members is None else members


@pytest.mark.parametrize("world_size, members", LAYOUTS, ids=IDS)
async def test_all_gather_copies_each_members_tensor_of_its_own_size(world_size, members):
    ranks = member_list(world_size, members)
    n = len(ranks)
    size_of = [lambda i: 0, lambda i: 1, lambda i: i + 3, lambda i: 1000 + 7 * i]

    async def body(group, rank):
        results = []
        for dtype in DTYPES:
            for sizes in size_of:
                out = [np.zeros(sizes(i), dtype) for i in range(n)]
                mine = values(dtype, sizes(max(group.rank, 0)), rank)
                if group.rank >= 0:
                    await group.all_gather(out, mine)
                results.append(out)
        return results

    per_rank = await in_layout(world_size, members, body)
    for rank in range(world_size):
        index = 0
        for dtype in DTYPES:
            for sizes in size_of:
                got = per_rank[rank][index]
                index += 1
                for i, owner in enumerate(ranks):
                    expected = (values(dtype, sizes(i), owner) if rank in ranks
                                else np.zeros(sizes(i), dtype))
                    np.testing.assert_array_equal(got[i], expected)


@pytest.mark.parametrize("world_size, members", LAYOUTS, ids=IDS)
async def test_all_gather_into_tensor_fills_blocks_in_member_order(world_size, members):
    ranks = member_list(world_size, members)
    n = len(ranks)

    async def body(group, rank):
        results = []
        for dtype in DTYPES:
            for count in COUNTS:
                out = np.zeros((n, count), dtype)
                if group.rank >= 0:
                    await group.all_gather_into_tensor(out, values(dtype, count, rank))
                results.append(out)
        return results

    per_rank = await in_layout(world_size, members, body)
    for rank in range(world_size):
        cases = [(d, c) for d in DTYPES for c in COUNTS]
        for got, (dtype, count) in zip(per_rank[rank], cases):
            expected = (np.stack([values(dtype, count, r) for r in ranks]) if rank in ranks
                        else np.zeros((n, count), dtype))
            np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("world_size, members", LAYOUTS, ids=IDS)
async def test_reduce_scatter_and_its_tensor_form_reduce_each_block_to_its_owner(world_size,
                                                                                 members):
    ranks = member_list(world_size, members)
    n = len(ranks)
    ops = [ReduceOp.SUM, ReduceOp.MAX, ReduceOp.AVG, ReduceOp.BXOR, ReduceOp.PRODUCT]
    dtypes = [np.dtype("float64"), np.dtype("int32"), np.dtype("uint8"), np.dtype("float32")]
    cases = [(d, op, c) for d in dtypes for op in ops for c in (0, 1, 1001)
             if not (op is ReduceOp.AVG and d.kind in "iu")
             and not (op is ReduceOp.BXOR and d.kind == "f")]

    def block(dtype, op, count, rank, i):
        # Member i's block has count + i elements (uneven) in the list form;
        # i = -1 is the tensor form's whole input.
        return rank_input(dtype, op, count + max(i, 0), rank * 100 + i + 1)

    async def body(group, rank):
        results = []
        me = group.rank
        for dtype, op, count in cases:
            listed = np.zeros(count + max(me, 0), dtype)
            tensor = np.zeros(count, dtype)
            if me >= 0:
                await group.reduce_scatter(listed, [block(dtype, op, count, rank, i)
                                                    for i in range(n)], op=op)
                await group.reduce_scatter_tensor(tensor, block(dtype, op, count * n, rank, -1),
                                                  op=op)
            results.append((listed, tensor))
        return results

    per_rank = await in_layout(world_size, members, body)
    for rank in range(world_size):
        me = ranks.index(rank) if rank in ranks else -1
        for (listed, tensor), (dtype, op, count) in zip(per_rank[rank], cases):
            if me < 0:
                assert not listed.any() and not tensor.any()
                continue
            expected = oracle([block(dtype, op, count, r, me) for r in ranks], op)
            np.testing.assert_array_equal(listed, expected, err_msg=f"{dtype} {op} {count}")
            wholes = [block(dtype, op, count * n, r, -1)[me * count:(me + 1) * count]
                      for r in ranks]
            np.testing.assert_array_equal(tensor, oracle(wholes, op),
                                          err_msg=f"tensor form {dtype} {op} {count}")


@pytest.mark.parametrize("world_size, members", LAYOUTS, ids=IDS)
async def test_gather_and_scatter_move_blocks_to_and_from_every_root(world_size, members):
    ranks = member_list(world_size, members)
    n = len(ranks)
    cases = [(root, dtype, count) for root in ranks for dtype in DTYPES[:3] for count in COUNTS]

    async def body(group, rank):
        results = []
        for root, dtype, count in cases:
            gathered = [np.zeros(count, dtype) for _ in range(n)] if rank == root else None
            received = np.zeros(count, dtype)
            if group.rank >= 0:
                await group.gather(values(dtype, count, rank, 1), gathered, root)
                blocks = ([values(dtype, count, root, 2, i) for i in range(n)]
                          if rank == root else None)
                await group.scatter(received, blocks, root)
            results.append((gathered, received))
        return results

    per_rank = await in_layout(world_size, members, body)
    for rank in range(world_size):
        for (gathered, received), (root, dtype, count) in zip(per_rank[rank], cases):
            if rank not in ranks:
                assert not received.any()
                continue
            if rank == root:
                for i, owner in enumerate(ranks):
                    np.testing.assert_array_equal(gathered[i], values(dtype, count, owner, 1))
            np.testing.assert_array_equal(received,
                                          values(dtype, count, root, 2, ranks.index(rank)))


@pytest.mark.parametrize("world_size, members", LAYOUTS, ids=IDS)
async def test_all_to_all_and_all_to_all_single_exchange_every_pair(world_size, members):
    ranks = member_list(world_size, members)
    n = len(ranks)

    def piece(dtype, sender, receiver):
        # Uneven: the piece from member s to member r has (s + 2 r) % 4 rows of 3.
        return values(dtype, 3 * ((sender + 2 * receiver) % 4), sender, receiver)

    async def body(group, rank):
        results = []
        me = group.rank
        for dtype in DTYPES:
            outs = [np.zeros(piece(dtype, i, max(me, 0)).size, dtype) for i in range(n)]
            out_rows = [piece(dtype, i, max(me, 0)).size // 3 for i in range(n)]
            single = np.zeros((sum(out_rows), 3), dtype)
            even = np.zeros((2 * n, 5), dtype)
            if me >= 0:
                ins = [piece(dtype, me, j) for j in range(n)]
                await group.all_to_all(outs, ins)
                rows_in = [p.size // 3 for p in ins]
                await group.all_to_all_single(single, np.concatenate(ins).reshape(-1, 3),
                                              out_rows, rows_in)
                await group.all_to_all_single(even, values(dtype, 10 * n, me).reshape(2 * n, 5))
            results.append((outs, single, even))
        return results

    per_rank = await in_layout(world_size, members, body)
    for rank in range(world_size):
        me = ranks.index(rank) if rank in ranks else -1
        for (outs, single, even), dtype in zip(per_rank[rank], DTYPES):
            if me < 0:
                assert not single.any() and not even.any()
                continue
            for i in range(n):
                np.testing.assert_array_equal(outs[i], piece(dtype, i, me))
            np.testing.assert_array_equal(
                single.reshape(-1), np.concatenate([piece(dtype, i, me) for i in range(n)]))
            expected = np.concatenate([values(dtype, 10 * n, i)[10 * me:10 * (me + 1)]
                                       for i in range(n)])
            np.testing.assert_array_equal(even.reshape(-1), expected)


@pytest.mark.parametrize("world_size, members", LAYOUTS, ids=IDS)
async def test_object_collectives_round_trip_python_objects(world_size, members):
    ranks = member_list(world_size, members)
    n = len(ranks)

    def thing(rank, index=0):
        return {"rank": rank, "index": index, "blob": b"x" * (rank * 1000), "t": (rank, None)}

    async def body(group, rank):
        if group.rank < 0:
            return None
        gathered = [None] * n
        await group.all_gather_object(gathered, thing(rank))
        results = {"all": gathered}
        for root in ranks:
            items = [thing(root, i) for i in range(3)] if rank == root else [None] * 3
            await group.broadcast_object_list(items, root)
            collected = [None] * n if rank == root else None
            await group.gather_object(thing(rank, 7), collected, root)
            out = [None]
            await group.scatter_object_list(out, [thing(root, i) for i in range(n)]
                                            if rank == root else None, root)
            results[root] = (items, collected, out[0])
        return results

    per_rank = await in_layout(world_size, members, body)
    for rank in range(world_size):
        result = per_rank[rank]
        if rank not in ranks:
            assert result is None
            continue
        assert result["all"] == [thing(r) for r in ranks]
        for root in ranks:
            items, collected, scattered = result[root]
            assert items == [thing(root, i) for i in range(3)]
            assert collected == ([thing(r, 7) for r in ranks] if rank == root else None)
            assert scattered == thing(root, ranks.index(rank))


@pytest.mark.parametrize("world_size, members", LAYOUTS, ids=IDS)
async def test_send_and_recv_deliver_in_order_per_tag(world_size, members):
    ranks = member_list(world_size, members)

    async def body(group, rank):
        if group.rank < 0 or len(ranks) == 1:
            return []
        right = ranks[(group.rank + 1) % len(ranks)]
        left = ranks[(group.rank - 1) % len(ranks)]
        got = []
        sends = [group.send(np.full(i + 1, rank * 10 + i, np.int32), right, tag=i % 2)
                 for i in range(4)]
        outs = [np.zeros(i + 1, np.int32) for i in range(4)]
        receives = [group.recv(outs[i], left, tag=i % 2) for i in (1, 3, 0, 2)]
        senders = await asyncio.gather(*sends, *receives)
        got = [out.tolist() for out in outs]
        return got, senders[4:]

    per_rank = await in_layout(world_size, members, body)
    for rank in ranks if len(ranks) > 1 else []:
        left = ranks[(ranks.index(rank) - 1) % len(ranks)]
        got, senders = per_rank[rank]
        assert got == [[left * 10 + i] * (i + 1) for i in range(4)]
        assert senders == [left] * 4


async def test_async_operations_on_two_groups_interleave_and_all_complete_correctly():
    async def body(world):
        quad = await world.new_group([0, 1, 2, 3])
        pair = await world.new_group([0, 2])
        work = []
        sums = [np.full(1000 * i + 1, world.rank + i, np.int64) for i in range(5)]
        copies = [np.full(70_000 * i + 3, world.rank * 10 + i, np.float32) for i in range(5)]
        if quad.rank >= 0:
            work += [asyncio.ensure_future(quad.all_reduce(x)) for x in sums]
        if pair.rank >= 0:
            work += [asyncio.ensure_future(pair.broadcast(y, src=2)) for y in copies]
        # Interleave the two streams with a world collective in between.
        total = np.ones(3, np.int64)
        await world.all_reduce(total)
        await asyncio.gather(*work)
        return sums, copies, total

    for rank, (sums, copies, total) in enumerate(await run_ranks(5, body)):
        np.testing.assert_array_equal(total, 5)
        for i, x in enumerate(sums):
            expected = sum(range(4)) + 4 * i if rank < 4 else rank + i
            np.testing.assert_array_equal(x, np.full(1000 * i + 1, expected))
        for i, y in enumerate(copies):
            expected = 20 + i if rank in (0, 2) else rank * 10 + i
            np.testing.assert_array_equal(y, np.full(70_000 * i + 3, expected, np.float32))


async def test_bad_arguments_are_refused_before_anything_is_sent():
    async def body(world):
        out = np.zeros(4, np.float32)
        messages = []
        attempts = [
            lambda: world.broadcast(out, src=5),
            lambda: world.reduce(out, dst=-1),
            lambda: world.all_gather([out], out),
            lambda: world.all_gather([out, out.astype(np.int32)], out),
            lambda: world.all_gather([out, out], np.zeros(4, np.float32)),
            lambda: world.all_gather_into_tensor(np.zeros(7, np.float32), out),
            lambda: world.reduce_scatter_tensor(out, np.zeros(9, np.float32)),
            lambda: world.gather(out, [out, out] if world.rank else None, dst=0),
            lambda: world.scatter(out, None, src=0) if world.rank == 0 else
            world.scatter(out, [out, out], src=0),
            lambda: world.all_to_all_single(np.zeros((3, 2)), np.zeros((3, 2))),
            lambda: world.all_to_all_single(np.zeros((2, 2)), np.zeros((2, 2)), [1, 2], [1, 1]),
            lambda: world.send(out, dst=world.rank),
            lambda: world.recv(out, src=None, tag=-1),  # from any source, bad tag
            lambda: world.send(out, dst=1 - world.rank, tag=-1),
            lambda: world.all_gather_object([None], 1),
            lambda: world.all_gather_object([None, None], lambda: 1),
        ]
        for attempt in attempts:
            with pytest.raises(ConfigurationError) as info:
                attempt()
            messages.append(str(info.value))
        # The group still works: nothing was sent, no sequence number taken.
        x = np.ones(2, np.float32)
        await world.all_reduce(x)
        return messages, x

    for messages, x in await run_ranks(2, body):
        np.testing.assert_array_equal(x, 2)
        assert "src 5 is not a member" in messages[0]
        assert "one tensor per member of the group (2), got 1" in messages[2]
        assert "same dtype" in messages[3]
        assert "share memory" in messages[4]
        assert "rows cannot be split evenly" in messages[9]
        assert "own rank" in messages[11]
        assert "recv: tag must be an int from 0" in messages[12]
        assert "cannot pickle" in messages[15]
