"""Linters run as tests: the group alone decides where an operation runs, and how."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from ._source import (
    PACKAGE,
    imports,
    is_in,
    module_name,
    package_files,
    relative,
    within,
)

pytestmark = pytest.mark.timeout(60)


#: The front doors: they convert arguments and hand plans to the group's execute or submit.
FRONT_DOORS = [p for p in package_files()
               if is_in(p, ("_api/", "_torch_backend/", "aio.py", "testing.py"))]
#: What decides where a plan runs, and how: the group's business only.
PLACEMENT_MODULES = ("asyncoll._group.runner", "asyncoll._group.fast_path",
                     "asyncoll._group.arena_path", "asyncoll._group.links_path",
                     "asyncoll._group.hierarchy",
                     "asyncoll._group.transports", "asyncoll._transport.link_mesh")
PLACEMENT_NAMES = {"run_here", "to_loop", "run_again", "remember", "in_turn", "on_fast_path",
                   "_runner", "_fast", "_repeats", "_ran_here", "kernel"}


def _placement_uses(source: str, module: str) -> list[str]:
    tree = ast.parse(source)
    found = [f"imports {name}" for name in sorted(imports(tree, module))
             if within(name, PLACEMENT_MODULES)]
    found += sorted({f"uses .{node.attr}" for node in ast.walk(tree)
                     if isinstance(node, ast.Attribute) and node.attr in PLACEMENT_NAMES})
    return found


def test_the_front_doors_are_found() -> None:
    assert {"blocking.py", "process_group.py", "aio.py"} <= {p.name for p in FRONT_DOORS}


@pytest.mark.parametrize("path", FRONT_DOORS, ids=relative)
def test_front_doors_never_place_operations_themselves(path: Path) -> None:
    # The group alone decides where a plan runs (GroupCore.execute, .submit, .again).
    found = _placement_uses(path.read_text(), module_name(path))

    assert found == [], f"{relative(path)}: {', '.join(found)}"


@pytest.mark.parametrize("source", [
    "def f(plan):\n    plan.run_here()",
    "def f(plan):\n    plan.to_loop()",
    "def f(group):\n    group._runner.here()",
    "from asyncoll._group.runner import Runner",
])
def test_the_placement_rule_catches_a_front_door_placing(source: str) -> None:
    assert _placement_uses(source, "asyncoll._api.blocking") != []


def test_the_placement_rule_allows_execute_and_submit() -> None:
    source = "def f(group, plan, loop):\n    group.execute(plan, loop)\n" \
             "    group.submit([plan], loop)\n    group.again('barrier', None)"
    assert _placement_uses(source, "asyncoll._api.blocking") == []


#: The group layer's modules that must not know either fast path's vocabulary:
#: each path binds its own kernels (GroupArena.kernel, GroupLinks.kernel).
PATH_FREE = ["core.py", "runner.py", "plan.py", "group.py", "transports.py"]


@pytest.mark.parametrize("name", PATH_FREE)
def test_the_group_core_names_neither_paths_steps_nor_teams(name: str) -> None:
    source = (PACKAGE / "_group" / name).read_text()
    named = [word for word in ("LinksStep", "LinksMesh", "ArenaStep", "DoublingOnLinks",
                               "_algorithms.arena", "_transport.link_mesh")
             if word in source]

    assert named == [], f"asyncoll/_group/{name} names {named}"
