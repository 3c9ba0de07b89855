"""asyncoll's errors in torch's terms: what the torch backend raises is a torch ``DistError``.

torch's callers catch a backend's failures as ``RuntimeError`` (gloo's are
torch's ``DistBackendError``, ``DistNetworkError`` and ``DistStoreError``),
while asyncoll's are its own classes (a ``CollectiveTimeoutError`` is a
``TimeoutError``, a ``ConfigurationError`` a ``ValueError``). An asyncoll
error that leaves the backend through torch becomes an instance of a class
that is both: torch's family first in meaning, asyncoll's class first in
the method order, made once per asyncoll class. So ``except RuntimeError``,
``except dist.DistBackendError`` and ``except CollectiveTimeoutError`` all
catch it, its message and attributes (a lost peer's ``rank`` and ``host``)
are the original's, and the original is its ``__cause__``. Which family:

- a lost peer (``PeerLostError``): ``DistNetworkError``;
- the rendezvous (``RendezvousError``, an exclusion aside): ``DistStoreError``;
- anything else (timeouts, failed or aborted operations, bad arguments):
  ``DistBackendError``.

asyncoll's own API (``asyncoll``, ``asyncoll.aio``) raises its own classes, unchanged.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NoReturn, ParamSpec, TypeVar

import torch.distributed as dist

from asyncoll.errors import AsyncollError, ExcludedError, PeerLostError, RendezvousError

P = ParamSpec("P")
R = TypeVar("R")

#: The class made for each asyncoll class, once.
_MADE: dict[type[AsyncollError], type[AsyncollError]] = {}
_NETWORK: type[Exception] = dist.DistNetworkError
_STORE: type[Exception] = dist.DistStoreError
_BACKEND: type[Exception] = dist.DistBackendError


def family(kind: type[AsyncollError]) -> type[Exception]:
    """The torch error class an asyncoll error class becomes through torch."""
    if issubclass(kind, PeerLostError):
        return _NETWORK
    if issubclass(kind, RendezvousError) and not issubclass(kind, ExcludedError):
        return _STORE
    return _BACKEND


def torch_class(kind: type[AsyncollError]) -> type[AsyncollError]:
    """The class both ``kind`` and its torch family (:func:`family`), made once."""
    made = _MADE.get(kind)
    if made is None:
        made = _MADE[kind] = type(kind.__name__, (kind, family(kind)), {
            "__module__": __name__, "__qualname__": kind.__name__,
            "__doc__": f"asyncoll's {kind.__name__} as torch's {family(kind).__name__}.",
            "__reduce__": _reduce, "_asyncoll_class": kind})
    return made


def torch_error(error: BaseException) -> BaseException:
    """``error`` as torch's callers expect it: an asyncoll error becomes an instance of its
    :func:`torch_class` with the same message and attributes, caused by ``error``;
    anything else (torch's own, already converted, not asyncoll's) is returned as it is."""
    if not isinstance(error, AsyncollError) or isinstance(error, dist.DistError):
        return error
    made = _remade(type(error), error.args, vars(error))
    made.__cause__ = error
    return made


def through_torch(method: Callable[P, R]) -> Callable[P, R]:
    """``method``, raising its asyncoll errors as torch's (:func:`torch_error`).

    For what torch calls: a ProcessGroup's or a Backend's methods, the reconfigure.
    """
    @functools.wraps(method)
    def converting(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return method(*args, **kwargs)
        except AsyncollError as exc:
            reraise(exc)

    return converting


def reraise(error: AsyncollError) -> NoReturn:
    """Raise ``error`` as torch's (:func:`torch_error`), caused by it; raise it as it is when
    it is torch's already (a converting method called another)."""
    converted = torch_error(error)
    if converted is error:
        raise error
    raise converted from error


def _remade(kind: type[AsyncollError], args: tuple[Any, ...],
            state: dict[str, Any]) -> AsyncollError:
    made_class = torch_class(kind)
    # Not through __init__: the original's arguments are its args and attributes
    # (PeerLostError keeps rank and host as attributes), and OSError's (a
    # TimeoutError's) __new__ would read a second argument as an errno.
    made = made_class.__new__(made_class)
    made.args = args
    made.__dict__.update(state)
    return made


def _reduce(self: AsyncollError) -> tuple[Any, ...]:
    # Pickled as the asyncoll class it was made from: the made class has no
    # importable name of its own.
    return _remade, (getattr(self, "_asyncoll_class"), self.args, dict(vars(self)))
