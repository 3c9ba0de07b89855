"""Linters run as tests: the public __all__ lists, and imports pointing one way, downwards."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import asyncoll

pytestmark = pytest.mark.timeout(60)

PACKAGE = Path(asyncoll.__file__).resolve().parent

# asyncio's stream API opens sockets; pure layers must not reach for it.
ASYNCIO_STREAM_NAMES = {"StreamReader", "StreamWriter", "StreamReaderProtocol",
                        "open_connection", "start_server", "open_unix_connection",
                        "start_unix_server", "streams"}


def _imports(tree: ast.AST, module: str) -> set[str]:
    """Every module name (and module.name for from-imports) the source imports."""
    package = module.rsplit(".", 1)[0]
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parent = ".".join(parts[:len(parts) - node.level + 1])
                base = f"{parent}.{base}" if base else parent
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def _uses_asyncio_streams(tree: ast.AST) -> bool:
    """asyncio.open_connection(...) and friends, reached through a plain `import asyncio`."""
    return any(isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
               and node.value.id == "asyncio" and node.attr in ASYNCIO_STREAM_NAMES
               for node in ast.walk(tree))


def _violations(source: str, module: str, forbid_msgpack: bool) -> list[str]:
    tree = ast.parse(source)
    found = []
    for name in sorted(_imports(tree, module)):
        top, _, rest = name.partition(".")
        if top == "socket":
            found.append(f"imports {name}")
        if top == "asyncio" and (rest.split(".")[0] in ASYNCIO_STREAM_NAMES):
            found.append(f"imports {name}")
        if forbid_msgpack and top == "msgpack":
            found.append(f"imports {name}")
    if _uses_asyncio_streams(tree):
        found.append("uses the asyncio streams API")
    return found


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _files(subpackage: str) -> list[Path]:
    return sorted((PACKAGE / subpackage).rglob("*.py"))


PURE_FILES = [(path, False) for path in _files("_wire")] + \
    [(path, True) for path in _files("_algorithms")]


# -- __all__ ---------------------------------------------------------------------------


@pytest.mark.parametrize("module", ["asyncoll", "asyncoll.aio", "asyncoll.errors",
                                    "asyncoll.types", "asyncoll.testing",
                                    "asyncoll.coordinator", "asyncoll._tensors",
                                    "asyncoll.group"])
def test_all_is_sorted_and_every_name_exists(module: str) -> None:
    mod = importlib.import_module(module)
    names = list(mod.__all__)

    assert names == sorted(names)
    assert len(set(names)) == len(names)
    assert [n for n in names if not hasattr(mod, n)] == []


# -- pure layers -------------------------------------------------------------------------


def test_pure_layers_are_found() -> None:
    names = {path.name for path, _ in PURE_FILES}

    assert {"frames.py", "messages.py", "dtypes.py", "chunking.py", "ops.py"} <= names


@pytest.mark.parametrize("path, forbid_msgpack", PURE_FILES,
                         ids=[str(p.relative_to(PACKAGE)) for p, _ in PURE_FILES])
def test_pure_layer_opens_no_socket(path: Path, forbid_msgpack: bool) -> None:
    found = _violations(path.read_text(), _module_name(path), forbid_msgpack)

    assert found == [], f"{path.relative_to(PACKAGE.parent)}: {', '.join(found)}"


@pytest.mark.parametrize("source", [
    "import socket",
    "import socket as s",
    "from socket import create_connection",
    "from asyncio import open_connection",
    "from asyncio.streams import StreamReader",
    "import asyncio.streams",
    "import asyncio\nasync def f():\n    await asyncio.open_connection('h', 1)",
    "import msgpack",
    "from msgpack import packb",
])
def test_the_import_linter_catches_forbidden_imports(source: str) -> None:
    assert _violations(source, "asyncoll._algorithms.x", forbid_msgpack=True) != []


@pytest.mark.parametrize("source", ["import numpy as np", "import asyncio",
                                    "from asyncio import gather", "import struct"])
def test_the_import_linter_allows_pure_imports(source: str) -> None:
    assert _violations(source, "asyncoll._algorithms.x", forbid_msgpack=True) == []


def test_the_import_linter_resolves_relative_imports() -> None:
    tree = ast.parse("from ..other import thing\nfrom . import sibling")

    assert _imports(tree, "asyncoll._algorithms.ring") >= {
        "asyncoll.other.thing", "asyncoll._algorithms.sibling"}


# -- the coordinator -------------------------------------------------------------------


def _asyncoll_imports_of(path: Path) -> set[str]:
    return {name for name in _imports(ast.parse(path.read_text()), _module_name(path))
            if name == "asyncoll" or name.startswith("asyncoll.")}


def _source_of(name: str) -> Path | None:
    relative = Path(*name.split("."))
    for candidate in (PACKAGE.parent / relative.with_suffix(".py"),
                      PACKAGE.parent / relative / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None  # a name imported from a module, not a module


@pytest.mark.parametrize("path", _files("coordinator"),
                         ids=lambda p: str(p.relative_to(PACKAGE)))
def test_coordinator_module_never_imports_algorithms(path: Path) -> None:
    bad = sorted(n for n in _asyncoll_imports_of(path)
                 if n == "asyncoll._algorithms" or n.startswith("asyncoll._algorithms."))

    assert bad == [], f"{path.relative_to(PACKAGE.parent)} imports {bad}"


def test_coordinator_reaches_algorithms_through_no_chain_of_imports() -> None:
    # Follow asyncoll-internal imports from the coordinator's modules. The
    # top-level asyncoll/__init__ (the sync API) is not followed: Python runs
    # it for any asyncoll.* import, but it is not what the daemon depends on.
    seen: dict[Path, Path | None] = {path: None for path in _files("coordinator")}
    todo = list(seen)
    while todo:
        path = todo.pop()
        for name in _asyncoll_imports_of(path):
            source = _source_of(name)
            if source is None or source == PACKAGE / "__init__.py" or source in seen:
                continue
            seen[source] = path
            todo.append(source)

    reached = sorted(str(p.relative_to(PACKAGE.parent)) for p in seen
                     if (PACKAGE / "_algorithms") in p.parents)
    chains: list[str] = []
    for name in reached:
        chain: list[str] = []
        node: Path | None = PACKAGE.parent / name
        while node is not None:
            chain.append(str(node.relative_to(PACKAGE.parent)))
            node = seen[node]
        chains.append(" <- ".join(chain))
    assert chains == []
