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
