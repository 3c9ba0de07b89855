"""Every file and module a docstring or comment names exists.

The package's and the tests' docstrings and comments (Python's, and the C
extension's) point readers at other files: `asyncoll/_native/express.c`,
`tests/integration/test_arena_path.py`, `docs/design/native.md`, a module by
its dotted name, `asyncoll._group.closing`, or, in the extension's own files,
a C file beside them by its bare name, `express.c`. A file moved or renamed leaves
such a pointer behind; this test lists every one that no longer leads anywhere.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

import asyncoll

pytestmark = pytest.mark.timeout(60)

ROOT = Path(asyncoll.__file__).resolve().parent.parent
#: The top-level folders a path in the text can start at.
TOP = ("asyncoll", "tests", "docs", "benchmarks", "examples", "deploy")
#: A path to a file (or a glob of files): a top-level folder, then a name with a suffix.
PATH = re.compile(rf"(?<![\w./-])(?:{'|'.join(TOP)})/[\w./*-]*?\.(?:py|pyi|c|h|md|ya?ml|toml"
                  r"|json|csv|png|sh|txt)\b")
#: A module by its dotted name, perhaps followed by names defined in it.
DOTTED = re.compile(r"(?<![\w.])asyncoll(?:\.\w+)+")
#: A C file by its bare name, as the extension's own files name each other.
BESIDE = re.compile(r"(?<![\w./-])\w+\.[ch]\b")
NATIVE = "asyncoll/_native/"
#: Words that are not pointers: a misspelling shown on purpose.
NOT_POINTERS = {"asyncoll.all_reduse"}
C_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.DOTALL)


def _python_texts(path: Path) -> Iterator[tuple[int, str]]:
    source = path.read_text()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            first = node.body[0] if node.body else None
            if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                    and isinstance(first.value.value, str)):
                yield first.lineno, first.value.value


def _c_texts(path: Path) -> Iterator[tuple[int, str]]:
    source = path.read_text()
    for match in C_COMMENT.finditer(source):
        yield source.count("\n", 0, match.start()) + 1, match.group(0)


def _texts() -> Iterator[tuple[str, int, str]]:
    for path in sorted([*ROOT.glob("asyncoll/**/*.py"), *ROOT.glob("tests/**/*.py"),
                        ROOT / "setup.py"]):
        for line, text in _python_texts(path):
            yield str(path.relative_to(ROOT)), line, text
    for path in sorted([*ROOT.glob("asyncoll/**/*.c"), *ROOT.glob("asyncoll/**/*.h")]):
        for line, text in _c_texts(path):
            yield str(path.relative_to(ROOT)), line, text


@cache
def _names_in(module: Path) -> frozenset[str]:
    """The names a module's top level defines, assigns or imports."""
    names: set[str] = set()
    for node in ast.parse(module.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        else:
            for target in ast.walk(node):
                if isinstance(target, ast.Name):
                    names.add(target.id)
                elif isinstance(target, ast.Constant) and isinstance(target.value, str):
                    names.add(target.value)  # __all__'s entries, lazily loaded names
    return frozenset(names)


def _module_file(parts: list[str]) -> Path | None:
    base = ROOT.joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py", base.with_suffix(".pyi")):
        if candidate.is_file():
            return candidate
    return None


def _extension_modules() -> set[str]:
    # The compiled modules, which exist as files only once built: named in setup.py.
    return set(re.findall(r'Extension\(\s*"([\w.]+)"', (ROOT / "setup.py").read_text()))


def _dotted_leads_somewhere(name: str) -> bool:
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        if ".".join(parts[:end]) in _extension_modules():
            return True
        module = _module_file(parts[:end])
        if module is not None:
            return end == len(parts) or parts[end] in _names_in(module)
    return False


def _path_exists(path: str) -> bool:
    return any(ROOT.glob(path)) if "*" in path else (ROOT / path).exists()


def _dead_pointers() -> list[str]:
    dead = []
    for where, line, text in _texts():
        found = [("", match) for match in [*PATH.finditer(text), *DOTTED.finditer(text)]]
        if where.startswith(NATIVE):
            found += [(NATIVE, match) for match in BESIDE.finditer(text)]
        for folder, match in found:
            pointer = folder + match.group(0)
            exists = (_path_exists(pointer) if "/" in pointer
                      else pointer in NOT_POINTERS or _dotted_leads_somewhere(pointer))
            if not exists:
                dead.append(f"{where}:{line + text.count(chr(10), 0, match.start())}: {pointer}")
    return dead


def test_every_path_and_module_a_docstring_or_comment_names_exists() -> None:
    dead = _dead_pointers()

    assert dead == [], "pointers to nothing:\n" + "\n".join(dead)


def test_the_scan_reads_docstrings_and_comments_of_python_and_c() -> None:
    # The test above cannot pass by reading nothing: it sees pointers known to be there.
    seen = {(where, found) for where, _, text in _texts()
            for found in [*PATH.findall(text), *DOTTED.findall(text), *BESIDE.findall(text)]}

    assert ("tests/unit/test_docstring_paths.py", "asyncoll/_native/express.c") in seen
    assert ("setup.py", "asyncoll._native._arena") in seen
    assert any(where.endswith(".c") and found.startswith("asyncoll.") for where, found in seen)
    assert any(where.startswith(NATIVE) and found == "express.c" for where, found in seen)
