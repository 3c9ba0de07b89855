"""Delegate: a part's method offered as the group's own, bound as the group is made."""

from __future__ import annotations

from asyncoll._group.delegate import Delegate, bind
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
        bind(self)


class Unbound:
    again = Delegate("_part", Part.again)

    def __init__(self) -> None:
        self._part = Part()


def test_the_wholes_method_is_the_parts_bound_method_with_no_call_between() -> None:
    whole = Whole()

    assert vars(whole)["again"] == whole._part.again  # on the group: found before the class's
    assert whole.again("barrier", root=2) == "barrier 2"
    assert whole._part.calls == 1


def test_each_whole_binds_its_own_part() -> None:
    one, two = Whole(), Whole()

    assert one.again.__self__ is one._part
    assert two.again.__self__ is two._part


def test_without_bind_the_delegate_still_finds_the_parts_method_and_keeps_nothing() -> None:
    whole = Unbound()

    assert whole.again("x") == "x -1"
    assert "again" not in vars(whole)


def test_on_the_class_it_is_the_delegate_with_the_parts_docstring() -> None:
    assert isinstance(Whole.again, Delegate)
    assert Whole.again.__doc__ == "Run ``what`` again."


def test_the_groups_hot_methods_and_parts_methods_are_delegates() -> None:
    names = ("execute", "submit", "again", "check_member", "plan", "send", "recv",
             "all_gather_object", "broadcast_object_list", "gather_object",
             "scatter_object_list")

    assert all(isinstance(vars(AsyncProcessGroup)[name], Delegate) for name in names)
