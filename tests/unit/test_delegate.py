"""Delegate: a part's method offered as the group's own, bound once and kept."""

from __future__ import annotations

from asyncoll._group.delegate import Delegate
from asyncoll._group.group import AsyncProcessGroup


class Part:
    def __init__(self) -> None:
        self.calls = 0

    def again(self, what: str, root: int = -1) -> str:
        """Run ``what`` again."""
        self.calls += 1
        return f"{what} {root}"


class Whole:
    again = Delegate("_part", Part.again)

    def __init__(self) -> None:
        self._part = Part()


def test_the_wholes_method_is_the_parts_bound_method_with_no_call_between() -> None:
    whole = Whole()

    assert whole.again("barrier", root=2) == "barrier 2"
    assert whole.again.__self__ is whole._part
    assert vars(whole)["again"] == whole._part.again  # kept: found before the descriptor
    assert whole._part.calls == 1


def test_each_whole_binds_its_own_part() -> None:
    one, two = Whole(), Whole()
    one.again("x")

    assert two.again.__self__ is two._part


def test_on_the_class_it_is_the_delegate_with_the_parts_docstring() -> None:
    assert isinstance(Whole.again, Delegate)
    assert Whole.again.__doc__ == "Run ``what`` again."


def test_the_groups_hot_methods_and_parts_methods_are_delegates() -> None:
    names = ("execute", "submit", "again", "check_member", "plan", "send", "recv",
             "all_gather_object", "broadcast_object_list", "gather_object",
             "scatter_object_list")

    assert all(isinstance(vars(AsyncProcessGroup)[name], Delegate) for name in names)
