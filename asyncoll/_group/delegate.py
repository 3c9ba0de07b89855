"""Delegate: a method of one of a group's parts, offered as the group's own.

AsyncProcessGroup holds its parts (the core that makes and places plans,
the object collectives, the point-to-point messages) rather than inheriting
from them, and offers their methods as its own: a Delegate on the class
declares each (its type and docstring are the part's method's), and
:func:`bind` puts the part's bound method on the group as it is made, so
every call finds it at once, with no call in between, which the calls that
repeat a small collective need. Binding as the group is made, in the same
order every time, keeps the group's attributes in CPython's compact form
(a later write to its ``__dict__`` would slow every attribute read).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, overload

P = ParamSpec("P")
R = TypeVar("R")


class Delegate(Generic[P, R]):
    """The method of the same name of the part a group keeps in its attribute ``part``,
    as the group's; ``method`` (that method, on the part's class) gives its type and
    docstring."""

    def __init__(self, part: str, method: Callable[Concatenate[Any, P], R]) -> None:
        self.part = part
        self._name = ""
        self.__doc__ = method.__doc__

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    @overload
    def __get__(self, group: None, owner: type) -> Delegate[P, R]: ...

    @overload
    def __get__(self, group: object, owner: type | None = None) -> Callable[P, R]: ...

    def __get__(self, group: object, owner: type | None = None) -> Any:
        # Only on the class, or on a group bind() has not run for yet: bind() puts the
        # part's method on the group itself, which is found before this.
        if group is None:
            return self
        return getattr(getattr(group, self.part), self._name)


def bind(group: object) -> None:
    """Put on ``group`` the bound method of its part for every Delegate of its class."""
    for cls in reversed(type(group).__mro__):
        for name, value in vars(cls).items():
            if isinstance(value, Delegate):
                setattr(group, name, getattr(getattr(group, value.part), name))
