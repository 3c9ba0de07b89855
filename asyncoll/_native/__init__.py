"""asyncoll's optional compiled fast path: whether it is here, and the codes it takes.

``pip install`` builds one C extension, :mod:`asyncoll._native._arena`
(the ``.c`` files beside this one; ``_arena.pyi`` types it), where a
compiler and Python's headers are found on Linux x86-64; where they are
not, the install still succeeds and the pure-Python path runs. What both
sides share is declared once, in :mod:`asyncoll._native.contract`. One
warning says so (:func:`warn_once`): from ``asyncoll-run``, once for the
whole job, which then runs its workers with the extension off; else from
the first process to set up a group's shared-memory arena, once, as a
:class:`PurePythonWarning`. Not at import: a job of 4096 ranks would print
it 4096 times.
``ASYNCOLL_PURE_PYTHON=1`` turns the extension off. Both paths keep one
arena design (layout, phases, error codes), so members of one job may run
either.

:data:`arena` is the extension module, or None; :func:`kind` maps a dtype and
a reduce op to the extension's code for that reduction, or None where numpy
stays the one to compute it.
"""

from __future__ import annotations

import importlib
import os
import platform
import sys
import warnings
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from asyncoll._native.contract import OPS, TYPES

__all__ = ["ENVIRONMENT", "MISSING_WORDS", "PurePythonWarning", "arena", "describe", "kind",
           "missing", "warn_once"]

#: Set to 1 (or true, yes, on) to run the pure-Python path even where the extension is built.
ENVIRONMENT = "ASYNCOLL_PURE_PYTHON"


class PurePythonWarning(RuntimeWarning):
    """The compiled fast path is not built here: asyncoll runs its pure-Python path."""


def _wanted() -> bool:
    return os.environ.get(ENVIRONMENT, "").strip().lower() not in ("1", "true", "yes", "on")


def _expected() -> bool:
    """Whether an install here builds the extension (where the arena runs at all)."""
    return sys.platform.startswith("linux") and platform.machine().lower() in (
        "x86_64", "amd64")


#: What the warning of a missing extension says.
MISSING_WORDS = ("asyncoll's compiled fast path (asyncoll._native._arena) is not built, so "
                 "small collectives on one host run the slower pure-Python path; reinstall "
                 "with a C compiler and Python's headers (gcc, python3-dev) to build it, or "
                 f"set {ENVIRONMENT}=1 to silence this")


def _load() -> tuple[ModuleType | None, str, bool]:
    """(the extension or None, which kernels run in words, whether it is missing)."""
    if not _wanted():
        return None, f"pure Python ({ENVIRONMENT}=1)", False
    try:
        module = importlib.import_module("asyncoll._native._arena")
    except ImportError as exc:
        return None, f"pure Python (the compiled extension is not built: {exc})", _expected()
    return module, ("native (C): the arena's all_reduce, reduce, broadcast, all_gather, "
                    "barrier and reductions"), False


_loaded, _WORDS, _MISSING = _load()
if TYPE_CHECKING:
    # Typed by _arena.pyi. mypy takes it as always there: every use checks for None.
    import asyncoll._native._arena as arena
else:
    #: The extension (asyncoll._native._arena), or None where the pure-Python path runs.
    arena = _loaded
_warned = False

# The extension's type codes, by numpy dtype (native byte order only).
_TYPES = {np.dtype(name): code for code, name in enumerate(TYPES)}
_KINDS: frozenset[int] = frozenset(arena.kinds()) if arena is not None else frozenset()


def kind(dtype: np.dtype[Any], op: Any) -> int | None:
    """The extension's code for reducing ``dtype`` with ``op`` (a ReduceOp), or None
    where the extension is off or numpy computes it (other dtypes, complex products)."""
    code = _TYPES.get(dtype)
    if code is None or op is None:
        return None
    number = code * OPS + op.value
    return number if number in _KINDS else None


def missing() -> bool:
    """Whether the extension should run here and is not built (not turned off)."""
    return _MISSING


def warn_once() -> None:
    """Warn, once in this process, that the extension is missing (where it is)."""
    global _warned
    if _MISSING and not _warned:
        _warned = True
        warnings.warn(MISSING_WORDS, PurePythonWarning, stacklevel=2)


def describe() -> str:
    """Which kernels are active, in words (``asyncoll --version`` prints it)."""
    return _WORDS
