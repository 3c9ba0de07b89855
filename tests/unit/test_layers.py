"""Linters run as tests: imports point one way, down the layers, and form no circle."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from ._source import (
    PACKAGE,
    asyncoll_imports_of,
    files,
    from_base,
    imports,
    module_name,
    relative,
    source_of,
    within,
)

pytestmark = pytest.mark.timeout(60)


# -- layers: imports point down only -----------------------------------------------------

#: The package's layers, bottom first, by module prefix (the longest prefix wins).
#: wire < transport < algorithms < group < runtime < api < tools.
LAYERS: dict[str, int] = {
    "asyncoll._wire": 0, "asyncoll.errors": 0, "asyncoll.types": 0,
    "asyncoll._defaults": 0, "asyncoll._version": 0, "asyncoll._compat": 0, "asyncoll._auth": 0,
    "asyncoll._stdout": 0,
    "asyncoll._tls": 0, "asyncoll._policy": 0,
    # The Python package (it imports numpy and its contract); its C files have layers of
    # their own, by what each mirrors (tests/unit/test_native_seam.py's C_LAYERS).
    "asyncoll._native": 0,
    "asyncoll._transport": 1,
    "asyncoll._algorithms": 2,
    "asyncoll._group": 3, "asyncoll.group": 3,
    "asyncoll._runtime": 4, "asyncoll._rendezvous": 4, "asyncoll.coordinator": 4,
    "asyncoll._api": 5, "asyncoll.aio": 5, "asyncoll._torch_backend": 5,
    "asyncoll.testing": 5, "asyncoll.torchft": 5, "asyncoll.torch": 5,
    "asyncoll.run": 6, "asyncoll._relay": 6, "asyncoll.bench": 6, "asyncoll._bench_report": 6,
    "asyncoll.cli": 6,
    "asyncoll.__main__": 6,
}
LAYER_NAMES = ["wire", "transport", "algorithms", "group", "runtime", "api", "tools"]


def _layer(name: str) -> int | None:
    best = max((p for p in LAYERS if name == p or name.startswith(p + ".")), key=len,
               default=None)
    return LAYERS[best] if best is not None else None


def _upward_imports(source: str, module: str) -> list[str]:
    own = _layer(module)
    if own is None:
        return [f"{module} is in no layer: add it to LAYERS"]
    found = []
    names = {n for n in imports(ast.parse(source), module) if n.startswith("asyncoll.")}
    for name in sorted(names):
        target = _layer(name)
        if target is not None and target > own:
            found.append(f"{module} ({LAYER_NAMES[own]}) imports {name} "
                         f"({LAYER_NAMES[target]})")
    return found


@pytest.mark.parametrize("path", [p for p in sorted(PACKAGE.rglob("*.py"))
                                  if p != PACKAGE / "__init__.py"],
                         ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_point_down_the_layers(path: Path) -> None:
    assert _upward_imports(path.read_text(), module_name(path)) == []


@pytest.mark.parametrize("source, module", [
    ("from asyncoll._runtime.session import Session", "asyncoll._group.core"),
    ("from asyncoll._group.faults import GroupFaults", "asyncoll._transport.tcp.mesh"),
    ("from asyncoll import aio", "asyncoll._runtime.runtime"),
    ("import asyncoll._algorithms.ring", "asyncoll._wire.frames"),
])
def test_the_layer_rule_catches_an_upward_import(source: str, module: str) -> None:
    assert _upward_imports(source, module) != []


def test_the_layer_rule_allows_downward_imports() -> None:
    source = "from asyncoll._transport.base import Mesh\nfrom asyncoll.errors import Closed"
    assert _upward_imports(source, "asyncoll._group.core") == []


# The transport is told its settings (asyncoll._transport.settings); nothing below the
# runtime reaches up to it, or to the faces above.
LOWER_LAYERS = ("_wire", "_transport", "_algorithms", "_rendezvous")
UPPER_LAYERS = ("asyncoll._runtime", "asyncoll._runtime.session", "asyncoll._group.core",
                "asyncoll.group", "asyncoll.aio", "asyncoll._api.blocking",
                "asyncoll._torch_backend", "asyncoll.testing")


@pytest.mark.parametrize("path", [p for layer in LOWER_LAYERS for p in files(layer)],
                         ids=relative)
def test_lower_layers_import_nothing_above_them(path: Path) -> None:
    bad = sorted(n for n in asyncoll_imports_of(path) if within(n, UPPER_LAYERS))

    assert bad == [], f"{relative(path)} imports {bad}"


# -- the house's shape (issue 41) --------------------------------------------------------


def _module_edges(source: str, module: str) -> set[str]:
    """The package's modules that ``source`` imports, wherever the import stands.

    Type-checking and function-level imports count. ``from a import b`` points
    at a.b when that is a module, else at a: the parent package that Python
    loads first anyway is no arrow of its own.
    """
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = from_base(node, module)
            for alias in node.names:
                whole = f"{base}.{alias.name}"
                found.add(whole if source_of(whole) is not None else base)
    return {name for name in found
            if within(name, ("asyncoll",)) and source_of(name) is not None}


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every set of modules that reach each other through imports (Tarjan's components)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        # Recursion is as deep as the longest chain of imports: a few dozen.
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1 or node in graph.get(node, ()):
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_circle_in_the_package() -> None:
    graph = {module_name(path): _module_edges(path.read_text(), module_name(path))
             for path in sorted(PACKAGE.rglob("*.py"))}

    assert _circles(graph) == []


@pytest.mark.parametrize("source, module, wanted", [
    ("from asyncoll._group import plan", "asyncoll._group.links_path", {"asyncoll._group.plan"}),
    ("from . import plan", "asyncoll._group.links_path", {"asyncoll._group.plan"}),
    ("from asyncoll.errors import Closed", "asyncoll._group.plan", {"asyncoll.errors"}),
    ("def f():\n    import asyncoll\n", "asyncoll._torch_backend.elastic", {"asyncoll"}),
    ("import typing\nif typing.TYPE_CHECKING:\n    from asyncoll._group.runner import Runner\n",
     "asyncoll._group.plan", {"asyncoll._group.runner"}),
])
def test_the_circle_rule_counts_every_import(source: str, module: str, wanted: set[str]) -> None:
    assert _module_edges(source, module) == wanted


def test_the_circle_rule_finds_a_circle_and_passes_a_chain() -> None:
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _circles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_the_links_path_knows_neither_the_hierarchy_nor_shared_memory() -> None:
    # The hierarchy is a fast path of its own, made of an arena and the leaders'
    # links: the links path is plain links, whatever host its members are on.
    path = PACKAGE / "_group" / "links_path.py"
    names = imports(ast.parse(path.read_text()), module_name(path))

    assert sorted(n for n in names if within(n, ("asyncoll._group.hierarchy",
                                                  "asyncoll._transport.shm",
                                                  "asyncoll._group.arena_path"))) == []
