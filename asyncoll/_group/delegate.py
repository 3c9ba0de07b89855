"""Delegate: a method of one of a group's parts, offered as the group's own.

AsyncProcessGroup holds its parts (the core that makes and places plans,
the object collectives, the point-to-point messages) rather than inheriting
from them, and offers their methods as its own with a Delegate each. The
first use on a group binds the part's method and keeps it on the group, as
functools.cached_property does: every later call finds it at once, with no
call in between, which the calls that repeat a small collective need.
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
        self._part = part
        self._name = ""
        self.__doc__ = method.__doc__

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    @overload
    def __get__(self, group: None, owner: type) -> Delegate[P, R]: ...

    @overload
    def __get__(self, group: object, owner: type | None = None) -> Callable[P, R]: ...

    def __get__(self, group: object, owner: type | None = None) -> Any:
        if group is None:
            return self
        bound = getattr(getattr(group, self._part), self._name)
        # Kept on the group, it shadows this (non-data) descriptor from now on.
        group.__dict__[self._name] = bound
        return bound
