"""Linters run as tests: the public faces, their sorted __all__ lists, and the lazy package."""

from __future__ import annotations

import importlib
import json

import pytest

import asyncoll

from ._source import loaded_by, python

pytestmark = pytest.mark.timeout(60)


# -- __all__ ---------------------------------------------------------------------------


@pytest.mark.parametrize("module", ["asyncoll", "asyncoll.aio", "asyncoll.errors",
                                    "asyncoll.types", "asyncoll.testing",
                                    "asyncoll.coordinator", "asyncoll._group.tensors",
                                    "asyncoll.group"])
def test_all_is_sorted_and_every_name_exists(module: str) -> None:
    mod = importlib.import_module(module)
    names = list(mod.__all__)

    assert names == sorted(names)
    assert len(set(names)) == len(names)
    assert [n for n in names if not hasattr(mod, n)] == []


def test_importing_asyncoll_defers_the_blocking_api_to_its_first_use() -> None:
    assert loaded_by("import asyncoll") == ["asyncoll", "asyncoll._version", "asyncoll.errors",
                                             "asyncoll.types"]
    assert "asyncoll._api.blocking" in loaded_by("import asyncoll\nasyncoll.all_reduce")


# -- the lazy public face ----------------------------------------------------------------


# (name, the module that defines it, its name there; None for the module itself)
PUBLIC_FACES = [
    ("P2POp", "asyncoll._api.blocking", "P2POp"),
    ("Work", "asyncoll._api.work", "Work"),
    ("AsyncProcessGroup", "asyncoll.group", "AsyncProcessGroup"),
    ("ProcessGroup", "asyncoll.group", "AsyncProcessGroup"),
    ("group", "asyncoll.group", None),
    ("aio", "asyncoll.aio", None),
    ("coordinator", "asyncoll.coordinator", None),
    ("ReduceOp", "asyncoll.types", "ReduceOp"),
    ("Compression", "asyncoll._algorithms.compression", "Compression"),
]


def test_public_names_are_the_defining_modules_objects_on_first_use() -> None:
    # A fresh interpreter, so that each name is looked up for the first time
    # whatever this process has imported already.
    functions = [n for n in asyncoll.__all__ if n[0].islower() and n != "group"]
    errors = [n for n in asyncoll.__all__ if n.endswith("Error")]
    # all_reduce and barrier: the blocking API's, fronted by the compiled entry where it
    # is built (asyncoll._api.front).
    fronted = {"all_reduce", "barrier"}
    faces = PUBLIC_FACES + [(n, "asyncoll._api.front" if n in fronted else
                             "asyncoll._api.blocking", n) for n in functions] + \
        [(n, "asyncoll.errors", n) for n in errors]
    script = f"""
import importlib, json
import asyncoll
missing_from_dir = sorted(set(asyncoll.__all__) - set(dir(asyncoll)))
wrong = []
for name, module, attribute in {faces!r}:
    value = getattr(asyncoll, name)
    source = importlib.import_module(module)
    if value is not (source if attribute is None else getattr(source, attribute)):
        wrong.append(name)
print(json.dumps([missing_from_dir, wrong]))
"""
    missing_from_dir, wrong = json.loads(python(script))

    assert len(functions) >= 30
    assert {name for name, _, _ in faces} >= set(asyncoll.__all__)
    assert wrong == [], f"asyncoll.<name> is not the defining module's object for {wrong}"
    assert missing_from_dir == [], f"dir(asyncoll) lacks {missing_from_dir}"


def test_unknown_attribute_raises_attribute_error_naming_it() -> None:
    with pytest.raises(AttributeError, match="'asyncoll' has no attribute 'all_reduse'"):
        asyncoll.all_reduse
    with pytest.raises(ImportError, match="all_reduse"):
        from asyncoll import all_reduse  # noqa: F401
