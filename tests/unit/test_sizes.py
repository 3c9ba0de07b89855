"""Linters run as tests: no module over 500 lines, no class with its bases over 450."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from ._source import module_name, package_files, relative

pytestmark = pytest.mark.timeout(60)


# -- modules ------------------------------------------------------------------------------

#: The longest a module of the package may be: past it, a file does several things.
MAX_LINES = 500


@pytest.mark.parametrize("path", package_files(), ids=relative)
def test_no_module_is_over_500_lines(path: Path) -> None:
    lines = len(path.read_text().splitlines())

    assert lines <= MAX_LINES, f"{relative(path)} has {lines} lines; split it by what it does"


#: The longest a class may be, counting the package's classes it inherits from:
#: past it, one object owns several things.
MAX_CLASS_LINES = 450


Names = dict[str, tuple[str, str]]
Classes = dict[tuple[str, str], tuple[ast.ClassDef, Names]]


def _classes() -> tuple[Classes, dict[str, Names]]:
    """Every class of the package by (module, name), with its module's names for classes;
    and each module's names, by module, to follow a class a module only re-exports."""
    found: Classes = {}
    modules: dict[str, Names] = {}
    for path in package_files():
        module = module_name(path)
        tree = ast.parse(path.read_text())
        names: Names = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names.update({alias.asname or alias.name: (node.module, alias.name)
                              for alias in node.names})
            elif isinstance(node, ast.Import):
                names.update({alias.asname or alias.name: (alias.name, "")
                              for alias in node.names})
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                names[node.name] = (module, node.name)
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                found[(module, node.name)] = (node, names)
        modules[module] = names
    return found, modules


def _base_key(base: ast.expr, names: dict[str, tuple[str, str]]) -> tuple[str, str] | None:
    if isinstance(base, ast.Name):
        return names.get(base.id)
    if isinstance(base, ast.Attribute) and isinstance(base.value, ast.Name):
        module = names.get(base.value.id)
        if module is not None:
            return ("".join(part for part in (module[0], "." + module[1] if module[1] else "")),
                    base.attr)
    return None


def _class_lines(key: tuple[str, str], classes: Classes, modules: dict[str, Names],
                 counted: set[tuple[str, str]]) -> int:
    """The lines of a class and of every class of the package it inherits from, once each
    (a base named through a module that re-exports it is followed to where it is defined)."""
    for _ in range(8):
        if key in classes:
            break
        key = modules.get(key[0], {}).get(key[1], key)
    if key in counted or key not in classes:
        return 0
    counted.add(key)
    node, names = classes[key]
    lines = (node.end_lineno or node.lineno) - node.lineno + 1
    return lines + sum(_class_lines(base_key, classes, modules, counted)
                       for base_key in (_base_key(base, names) for base in node.bases)
                       if base_key is not None)


CLASSES, MODULE_NAMES = _classes()


@pytest.mark.parametrize("key", sorted(CLASSES), ids=lambda key: f"{key[0]}.{key[1]}")
def test_no_class_with_its_bases_is_over_450_lines(key: tuple[str, str]) -> None:
    lines = _class_lines(key, CLASSES, MODULE_NAMES, set())

    assert lines <= MAX_CLASS_LINES, (f"{key[0]}.{key[1]} has {lines} lines with its bases: "
                                      "divide it by what each part owns")


def test_the_class_rule_counts_the_bases() -> None:
    source = "class A:\n    x = 1\n    y = 2\n\n\nclass B(A):\n    z = 3\n"
    tree = ast.parse(source)
    names = {"A": ("m", "A"), "B": ("m", "B")}
    classes = {("m", node.name): (node, names) for node in tree.body
               if isinstance(node, ast.ClassDef)}

    assert _class_lines(("m", "B"), classes, {}, set()) == 2 + 3


def test_the_class_rule_follows_a_base_a_module_re_exports() -> None:
    # asyncoll.aio.World inherits AsyncProcessGroup through asyncoll.group, which
    # defines nothing and re-exports it from asyncoll._group.group.
    world = CLASSES[("asyncoll.aio", "World")][0]
    group = CLASSES[("asyncoll._group.group", "AsyncProcessGroup")][0]
    own = [(node.end_lineno or node.lineno) - node.lineno + 1 for node in (world, group)]

    assert _class_lines(("asyncoll.aio", "World"), CLASSES, MODULE_NAMES, set()) == sum(own)
