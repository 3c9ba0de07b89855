"""Docstrings and --help are Markdown, which the API reference (mkdocstrings) renders.

reST markup showed raw there and in every command's --help: double backticks,
roles such as :func:`x`, and "::" before a literal block (issue 59). Code is in
single backticks, a literal block is a fenced one.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import io
import re
from pathlib import Path

import pytest

import asyncoll

pytestmark = pytest.mark.timeout(60)

PACKAGE = Path(asyncoll.__file__).resolve().parent
#: What the reference pages read (docs/reference/*.md), and the commands' modules.
DOCUMENTED = ["_api/blocking.py", "_api/work.py", "_api/world.py", "_api/front.py",
              "types.py", "errors.py", "aio.py", "testing.py", "group.py", "__init__.py",
              "_group/group.py", "_group/objects.py", "_group/point_to_point.py",
              "cli.py", "run.py", "bench.py", "coordinator/__init__.py",
              "coordinator/cli.py", "_version.py", "_stdout.py"]
COMMANDS = [("asyncoll.cli", []), ("asyncoll.cli", ["status"]), ("asyncoll.cli", ["trace"]),
            ("asyncoll.run", []), ("asyncoll.coordinator.cli", []), ("asyncoll.bench", [])]
REST = re.compile(r"(?<!`)``(?!`)|:(?:func|class|meth|attr|data|mod|exc|obj):`|::\s*$",
                  re.MULTILINE)


def _docstrings(path: Path) -> list[tuple[str, str]]:
    tree = ast.parse(path.read_text())
    found = []
    for node in [tree, *ast.walk(tree)]:
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            text = ast.get_docstring(node, clean=False)
            if text:
                found.append((getattr(node, "name", "(module)"), text))
    return found


@pytest.mark.parametrize("module", DOCUMENTED)
def test_the_documented_modules_docstrings_have_no_rest_markup(module: str) -> None:
    bad = [f"{name}: {REST.search(text).group(0)!r}"  # type: ignore[union-attr]
           for name, text in _docstrings(PACKAGE / module) if REST.search(text)]

    assert bad == []


@pytest.mark.parametrize("module, argv", COMMANDS,
                         ids=[" ".join([m, *a]) for m, a in COMMANDS])
def test_help_shows_no_rest_markup(module: str, argv: list[str]) -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        importlib.import_module(module).main([*argv, "--help"])
    text = out.getvalue()

    assert text.startswith("usage:")
    assert REST.findall(text) == []
