"""The torch backend's view of the tensor a repeated call took last (repeats.LastFlat)."""

from __future__ import annotations

import weakref

import pytest

torch = pytest.importorskip("torch")

from asyncoll._torch_backend.repeats import LastFlat  # noqa: E402 - after the skip


def test_the_same_tensor_gets_the_same_view_and_writes_through_it_reach_the_tensor():
    flat, tensor = LastFlat(), torch.zeros(2, 3)
    first = flat.of(tensor)

    assert flat.of(tensor) is first
    first[4] = 7.0
    assert tensor[1, 1].item() == 7.0


@pytest.mark.parametrize("change", [
    lambda t: t.set_(torch.zeros(6)),
    lambda t: t.resize_(4),  # smaller: the same memory (numpy made it not resizable)
    lambda t: t.resize_(2, 3).t_(),
    lambda t: setattr(t, "data", torch.zeros(6, dtype=torch.float64)),
], ids=["set_", "resize_", "transposed in place", ".data of another dtype"])
def test_a_tensor_moved_reshaped_or_retyped_in_place_gets_a_view_made_anew(change):
    flat, tensor = LastFlat(), torch.zeros(6)
    before = flat.of(tensor)

    change(tensor)
    after = flat.of(tensor)

    if tensor.is_contiguous():
        assert after is not before and after.size == tensor.numel()
        after[:] = 5.0
        assert bool((tensor == 5.0).all())
    else:
        assert after is None  # the full path says what is wrong with it


def test_another_tensor_and_a_complex_one_are_not_taken_for_the_last():
    flat, tensor = LastFlat(), torch.zeros(3)
    first = flat.of(tensor)
    assert flat.of(torch.zeros(3)) is not first

    complex_tensor = torch.zeros(3, dtype=torch.complex64)
    assert flat.of(complex_tensor) is not flat.of(complex_tensor)


def test_the_last_tensor_is_held_weakly_and_its_memory_let_go_with_it():
    flat, tensor = LastFlat(), torch.zeros(3)
    memory = weakref.ref(flat.of(tensor))  # the view, which holds the tensor's memory
    del tensor

    assert flat._tensor is None and memory() is None


def test_a_tensor_gone_after_another_was_taken_leaves_the_other_s_view():
    flat, first, second = LastFlat(), torch.zeros(3), torch.zeros(3)
    flat.of(first)
    view = flat.of(second)
    del first

    assert flat.of(second) is view


# -- a blocking all_reduce's repeat, checked in the fewest steps (repeats.blocking_all_reduce)


class _Express:
    """The compiled entry: answers as told, and notes what it was asked."""

    def __init__(self, answer) -> None:
        self.answer, self.asked = answer, []

    def all_reduce(self, array, op):
        self.asked.append((array.size, op))
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


class _Owner:
    """The TorchCollectives attributes blocking_all_reduce reads."""

    def __init__(self, express, default_limit=None) -> None:
        self._group = type("Group", (), {"express": express})()
        self._default_limit, self._flat = default_limit, None
        self._named, self._world, self.failures = "the test's group", None, []

    def _failed_in_this_thread(self, error) -> None:
        self.failures.append(error)


def _options(async_op=False, timeout=None):
    """torch's options of a SUM, whose op the full path has seen (as a first call does)."""
    from asyncoll._torch_backend import repeats

    options = torch.distributed.AllreduceOptions()
    options.asyncOp, options.reduceOp = async_op, torch.distributed.ReduceOp.SUM
    if timeout is not None:
        options.timeout = timeout
    repeats.reduce_op(options.reduceOp.op)
    return options


def test_a_blocking_repeat_runs_through_the_compiled_entry_and_gives_torch_no_work():
    from asyncoll._torch_backend.repeats import blocking_all_reduce
    from asyncoll.types import ReduceOp

    express, tensor = _Express(True), torch.zeros(5)
    owner = _Owner(express)
    assert blocking_all_reduce(owner, tensor, _options()) == (True, None)
    assert express.asked == [(5, ReduceOp.SUM)]
    express.answer = False  # the entry declined: the full path runs the call
    assert blocking_all_reduce(owner, tensor, _options()) == (False, None)


@pytest.mark.parametrize("case", ["async", "own timeout", "set_timeout", "no entry"])
def test_a_call_with_a_deadline_or_a_work_to_give_or_no_entry_is_left_to_the_full_path(case):
    from datetime import timedelta

    from asyncoll._torch_backend.repeats import blocking_all_reduce

    express = _Express(True)
    owner = _Owner(None if case == "no entry" else express,
                   0.05 if case == "set_timeout" else None)
    options = _options(async_op=case == "async",
                       timeout=timedelta(seconds=2) if case == "own timeout" else None)
    assert blocking_all_reduce(owner, torch.zeros(3), options) == (False, None)
    assert express.asked == []


def test_a_repeat_that_raised_gives_a_work_whose_wait_raises_and_notes_the_failure():
    from asyncoll._torch_backend.repeats import blocking_all_reduce
    from asyncoll.errors import PeerLostError

    lost = PeerLostError("rank 1 was lost")
    owner = _Owner(_Express(lost))
    ran, work = blocking_all_reduce(owner, torch.zeros(3), _options())
    assert ran and work is not None and owner.failures == [lost]
    with pytest.raises(Exception, match="rank 1 was lost"):
        work.wait()
