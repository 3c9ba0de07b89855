"""torch groups over the blocking API's world: the ``asyncoll://`` init method.

``torch.distributed.init_process_group("asyncoll", init_method="asyncoll://")``
makes torch's default group run on the world of asyncoll's own blocking API
(``asyncoll.init_process_group``, called first, or here from the environment),
with that world's rank and size, instead of on a job of its own. That is what
lets a torch program go on after a lost rank in an elastic job: destroy the
torch group, ``asyncoll.reconfigure()``, and init the torch group again; the
process keeps running, with its new rank and size.

torch asks an init method for a Store. The one given here is local to each
process: torch's collectives and asyncoll's never need a shared store (asyncoll's
coordinator does the rendezvous), and a shared one could not outlive a lost rank
that hosted it. A program that uses torch's default store to talk between
processes needs ``env://`` or ``tcp://``; ``TORCH_DIST_INIT_BARRIER=1``, which
counts processes in the store, is refused.
"""

from __future__ import annotations

import importlib
import uuid
import weakref
from collections.abc import Iterator
from datetime import timedelta
from typing import Any
from urllib.parse import parse_qs, urlparse

from asyncoll.errors import ConfigurationError

SCHEME = "asyncoll"
#: The key, in the store the rendezvous gives, that names the world it was made for.
WORLD_KEY = "asyncoll/world"
#: The worlds our stores name, by token (an ended world is dropped with its last user).
_named: weakref.WeakValueDictionary[str, Any] = weakref.WeakValueDictionary()


def register_init_method() -> None:
    """Make ``asyncoll://`` an init method of torch.distributed (idempotent)."""
    handlers = importlib.import_module("torch.distributed.rendezvous")
    if SCHEME not in getattr(handlers, "_rendezvous_handlers", {}):
        handlers.register_rendezvous_handler(SCHEME, rendezvous)


def rendezvous(url: str, timeout: timedelta | None = None,
               **_: Any) -> Iterator[tuple[Any, int, int]]:
    """torch's rendezvous handler: (a store naming it, rank, size) of the blocking API's world.

    Joins the job first (``asyncoll.init_process_group`` from the environment)
    when the program has not. A rank or size torch passes (``rank=``,
    ``world_size=``) must be the world's.

    Raises:
        ConfigurationError: a rank or size that is not the world's, or
            TORCH_DIST_INIT_BARRIER=1.
    """
    from asyncoll._api import blocking, world

    # torch's own reading of TORCH_DIST_INIT_BARRIER, where this torch has one.
    c10d = importlib.import_module("torch.distributed.distributed_c10d")
    if getattr(c10d, "_is_barrier_after_init", lambda: 0)():
        raise ConfigurationError("TORCH_DIST_INIT_BARRIER=1 counts processes in torch's "
                                 "store, which asyncoll:// keeps local to each process; unset "
                                 "it (asyncoll's own rendezvous already waits for everyone)")
    if not blocking.is_initialized():
        blocking.init_process_group(init_method="env://", timeout=timeout)
    rank, size = blocking.get_rank(), blocking.get_world_size()
    asked = {key: values[-1] for key, values in parse_qs(urlparse(url).query).items()}
    for key, actual in (("rank", rank), ("world_size", size)):
        wanted = asked.get(key, "-1")
        if wanted not in ("-1", str(actual)):
            raise ConfigurationError(
                f"init_process_group was given {key}={wanted}, but asyncoll's world has "
                f"{key} {actual}: with init_method='asyncoll://' leave rank and world_size "
                "out (they come from asyncoll.get_rank() and asyncoll.get_world_size())")
    yield _store_naming(world.default()), rank, size
    raise RuntimeError("asyncoll:// gives one rendezvous per init_process_group call")


def world_of(store: Any) -> Any:
    """The blocking API's aio.World that ``store`` (torch's wrapping of our store) names.

    None when ``store`` does not come from ``asyncoll://``.

    Raises:
        RuntimeError: the world was reconfigured or destroyed since the rendezvous.
    """
    from asyncoll._api import world

    while getattr(store, "underlying_store", None) is not None:
        store = store.underlying_store
    if type(store).__name__ != "HashStore" or not store.check([WORLD_KEY]):
        return None
    current = world.current  # the world the blocking API runs now
    if current is None or _named.get(bytes(store.get(WORLD_KEY)).decode()) is not current:
        raise RuntimeError("asyncoll's world was reconfigured or destroyed after this "
                           "init_process_group's rendezvous: call init_process_group("
                           "init_method='asyncoll://') again")
    return current


def _store_naming(world: Any) -> Any:
    """A process-local torch store that names ``world`` (a fresh token under our key)."""
    token = uuid.uuid4().hex
    _named[token] = world
    store = importlib.import_module("torch.distributed").HashStore()
    store.set(WORLD_KEY, token)
    return store
