"""Linters run as tests: the pure layers (wire, algorithms) open no socket."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from ._source import PACKAGE, files, imports, module_name

pytestmark = pytest.mark.timeout(60)


# asyncio's stream API opens sockets; pure layers must not reach for it.
ASYNCIO_STREAM_NAMES = {"StreamReader", "StreamWriter", "StreamReaderProtocol",
                        "open_connection", "start_server", "open_unix_connection",
                        "start_unix_server", "streams"}


def _uses_asyncio_streams(tree: ast.AST) -> bool:
    """asyncio.open_connection(...) and friends, reached through a plain `import asyncio`."""
    return any(isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
               and node.value.id == "asyncio" and node.attr in ASYNCIO_STREAM_NAMES
               for node in ast.walk(tree))


def _violations(source: str, module: str, forbid_msgpack: bool) -> list[str]:
    tree = ast.parse(source)
    found = []
    for name in sorted(imports(tree, module)):
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


PURE_FILES = [(path, False) for path in files("_wire")] + \
    [(path, True) for path in files("_algorithms")]


# -- pure layers -------------------------------------------------------------------------


def test_pure_layers_are_found() -> None:
    names = {path.name for path, _ in PURE_FILES}

    assert {"frames.py", "messages.py", "dtypes.py", "chunking.py", "ops.py"} <= names


@pytest.mark.parametrize("path, forbid_msgpack", PURE_FILES,
                         ids=[str(p.relative_to(PACKAGE)) for p, _ in PURE_FILES])
def test_pure_layer_opens_no_socket(path: Path, forbid_msgpack: bool) -> None:
    found = _violations(path.read_text(), module_name(path), forbid_msgpack)

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

    assert imports(tree, "asyncoll._algorithms.ring") >= {
        "asyncoll.other.thing", "asyncoll._algorithms.sibling"}
