"""Every collective of the blocking API, blocking and with async_op=True, checked.

Run under asyncoll-run. Each rank runs each collective on the world and on
a sub-group (every other rank, or those COLLECTIVES_SUBGROUP names), checks
its result against numpy (and that ranks outside the sub-group are left
untouched), and prints
"Process R checked K results" at the end; any wrong result raises.
"""

from __future__ import annotations

import os

import numpy as np

import asyncoll as dist


def expect(got, expected, what):
    if not np.array_equal(np.asarray(got), np.asarray(expected)):
        raise AssertionError(f"{what}: got {got!r}, expected {expected!r}")


def run(call, async_op):
    """Call a collective blocking, or with async_op=True and a wait() on its Work."""
    if async_op:
        work = call(True)
        if work is not None:
            work.wait(timeout=60)
            assert work.is_completed() and work.exception() is None
            work.get_future().result(0)
    else:
        assert call(False) is None


def check_group(group, ranks, me, async_op):
    """Run every collective on ``group`` (global ranks ``ranks``); return checks made."""
    n = len(ranks)
    idx = ranks.index(me) if me in ranks else -1
    member = idx >= 0
    checks = 0

    def done(got, expected, what):
        nonlocal checks
        expect(got, expected if member else got_before[what], what)
        checks += 1

    got_before = {}

    def before(what, value):
        got_before[what] = np.array(value, copy=True)
        return value

    x = before("all_reduce", np.full(7, me + 1, np.float64))
    run(lambda a: dist.all_reduce(x, op=dist.ReduceOp.SUM, group=group, async_op=a), async_op)
    done(x, np.full(7, sum(r + 1 for r in ranks)), "all_reduce")

    root = ranks[-1]
    b = before("broadcast", np.full(1001, me, np.int32))
    run(lambda a: dist.broadcast(b, src=root, group=group, async_op=a), async_op)
    done(b, np.full(1001, root), "broadcast")

    r = before("reduce", np.full(5, me + 2, np.int64))
    run(lambda a: dist.reduce(r, dst=root, op=dist.ReduceOp.PRODUCT, group=group,
                              async_op=a), async_op)
    done(r, np.full(5, np.prod([q + 2 for q in ranks])) if me == root else np.full(5, me + 2),
         "reduce")

    out = [np.zeros(i + 1, np.float32) for i in range(n)]
    mine = np.full(max(idx, 0) + 1, me, np.float32)
    got_before["all_gather"] = np.concatenate(out)
    run(lambda a: dist.all_gather(out, mine, group=group, async_op=a), async_op)
    done(np.concatenate(out), np.concatenate([np.full(i + 1, q) for i, q in enumerate(ranks)]),
         "all_gather")

    whole = before("all_gather_into_tensor", np.zeros((n, 3), np.int16))
    run(lambda a: dist.all_gather_into_tensor(whole, np.full(3, me, np.int16), group=group,
                                              async_op=a), async_op)
    done(whole, np.repeat(np.array(ranks)[:, None], 3, axis=1), "all_gather_into_tensor")

    rs = before("reduce_scatter", np.zeros(4, np.int64))
    run(lambda a: dist.reduce_scatter(rs, [np.full(4, me * 10 + i) for i in range(n)],
                                      group=group, async_op=a), async_op)
    done(rs, np.full(4, sum(q * 10 + idx for q in ranks)), "reduce_scatter")

    rst = before("reduce_scatter_tensor", np.zeros(2, np.float64))
    run(lambda a: dist.reduce_scatter_tensor(rst, np.arange(2.0 * n) + me,
                                             op=dist.ReduceOp.MAX, group=group, async_op=a),
        async_op)
    done(rst, np.arange(2.0 * n)[2 * max(idx, 0):2 * max(idx, 0) + 2] + max(ranks),
         "reduce_scatter_tensor")

    gathered = [np.zeros(2, np.uint8) for _ in range(n)] if me == root else None
    run(lambda a: dist.gather(np.full(2, me, np.uint8), gathered, dst=root, group=group,
                              async_op=a), async_op)
    if me == root:
        expect(np.stack(gathered), np.repeat(np.array(ranks)[:, None], 2, axis=1), "gather")
        checks += 1

    sc = before("scatter", np.zeros(3, np.int32))
    parts = [np.full(3, 100 + i, np.int32) for i in range(n)] if me == root else None
    run(lambda a: dist.scatter(sc, parts, src=root, group=group, async_op=a), async_op)
    done(sc, np.full(3, 100 + idx), "scatter")

    a2a = [np.zeros(2, np.int64) for _ in range(n)]
    got_before["all_to_all"] = np.concatenate(a2a)
    run(lambda a: dist.all_to_all(a2a, [np.full(2, me * 100 + q) for q in ranks], group=group,
                                  async_op=a), async_op)
    done(np.concatenate(a2a), np.concatenate([np.full(2, q * 100 + me) for q in ranks]),
         "all_to_all")

    single = before("all_to_all_single", np.zeros((n, 2), np.float32))
    run(lambda a: dist.all_to_all_single(single, np.full((n, 2), me, np.float32), group=group,
                                         async_op=a), async_op)
    done(single, np.repeat(np.array(ranks, np.float32)[:, None], 2, axis=1), "all_to_all_single")

    run(lambda a: dist.barrier(group=group, async_op=a), async_op)

    if member:
        objects = [None] * n
        dist.all_gather_object(objects, {"rank": me}, group=group)
        expect([o["rank"] for o in objects], ranks, "all_gather_object")
        items = [f"from {root}", root] if me == root else [None, None]
        dist.broadcast_object_list(items, src=root, group=group)
        expect(items, [f"from {root}", root], "broadcast_object_list")
        collected = [None] * n if me == root else None
        dist.gather_object(me * 2, collected, dst=root, group=group)
        if me == root:
            expect(collected, [q * 2 for q in ranks], "gather_object")
        one = [None]
        dist.scatter_object_list(one, [("item", q) for q in ranks] if me == root else None,
                                 src=root, group=group)
        expect(one[0], ("item", me), "scatter_object_list")
        checks += 3 + (me == root)
        if n > 1:
            right, left = ranks[(idx + 1) % n], ranks[(idx - 1) % n]
            inbox = np.zeros(3, np.int64)
            if async_op:
                works = [dist.isend(np.full(3, me), right, group=group, tag=4),
                         dist.irecv(inbox, left, group=group, tag=4)]
                for work in works:
                    work.wait(timeout=60)
            else:
                ops = [dist.P2POp(dist.isend, np.full(3, me), right, group, 4),
                       dist.P2POp(dist.irecv, inbox, left, group, 4)]
                for work in dist.batch_isend_irecv(ops):
                    work.wait(timeout=60)
            expect(inbox, np.full(3, left), "isend/irecv")
            checks += 1
    return checks


def main():
    dist.init_process_group()
    me, n = dist.get_rank(), dist.get_world_size()
    chosen = os.environ.get("COLLECTIVES_SUBGROUP")  # "0,3": the sub-group's ranks
    members = ([int(r) for r in chosen.split(",")] if chosen else
               [r for r in range(n) if r % 2 == (n - 1) % 2])
    sub = dist.new_group(members)
    checks = 0
    for async_op in (False, True):
        checks += check_group(None, list(range(n)), me, async_op)
        checks += check_group(sub, members, me, async_op)
    sockets = open_sockets()
    links = direct_links(None), direct_links(sub)
    if n > 1:
        # Plain send/recv pairs: ranks 0 and n - 1 swap a tensor.
        if me in (0, n - 1):
            other = n - 1 - me
            box = np.zeros(4, np.float64)
            if me == 0:
                dist.send(np.full(4, 0.5), dst=other)
                assert dist.recv(box, src=other) == other
            else:
                assert dist.recv(box, src=other) == other
                dist.send(np.full(4, 0.5 + me), dst=other)
            expect(box, np.full(4, 0.5 + (n - 1) if me == 0 else 0.5), "send/recv")
            checks += 1
        # recv without src: every other rank sends to rank 0, which takes them as they come.
        if me == 0:
            senders = []
            for _ in range(n - 1):
                box = np.zeros(2, np.int64)
                senders.append(dist.recv(box, tag=6))
                expect(box, np.full(2, senders[-1]), "recv without src")
            assert sorted(senders) == list(range(1, n)), senders
        else:
            dist.send(np.full(2, me, np.int64), dst=0, tag=6)
        checks += 1
    dist.destroy_process_group()
    print(f"Process {me} checked {checks} results, holding {sockets} sockets after the "
          f"collectives, {links[0]} + {links[1]} of them its groups' direct links", flush=True)


def direct_links(group):
    """How many members this one has a direct link with in ``group`` (None: the world)."""
    from asyncoll._api import world

    resolved = world.resolve(group)
    links = getattr(resolved._core._fast, "links", None)  # a same-host group has an arena instead
    return links.connected if links is not None else 0


def open_sockets():
    """How many of this process's file descriptors are sockets (-1: unknown here)."""
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return -1
    count = 0
    for name in names:
        try:
            count += os.readlink(f"/proc/self/fd/{name}").startswith("socket:")
        except OSError:
            pass  # the listing's own descriptor, closed by now
    return count


if __name__ == "__main__":
    main()
