"""Linters run as tests: the runtime alone reads the environment, starts threads, hooks exit."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from ._source import PACKAGE, dotted, is_in, package_files, relative

pytestmark = pytest.mark.timeout(60)


# -- the runtime owns the environment, threads and exit hooks ---------------------------

# The one reader of the environment, and the tools that are programs of their own
# (launcher, benchmark driver, operator's command, daemon): they may read it.
# _native: ASYNCOLL_PURE_PYTHON decides at import which code is loaded, before any
# runtime exists (as `asyncoll --version` reports it).
ENVIRONMENT_READERS = ("_runtime/settings.py", "run.py", "bench.py", "cli.py",
                       "coordinator/cli.py", "_native/__init__.py")
# What may start threads and register exit hooks: the runtime alone (asyncoll-run uses it).
THREAD_OWNERS = ("_runtime/",)
_ENVIRONMENT_NAMES = {"environ", "environb", "getenv", "getenvb", "putenv", "unsetenv"}
_ENVIRONMENT_WRITERS = {"update", "setdefault", "pop", "popitem", "clear", "__setitem__",
                        "__delitem__"}


def _aliases(tree: ast.AST, module: str, names: set[str]) -> set[str]:
    """Local names bound by ``from module import name`` (or ``as``) for ``names``."""
    return {alias.asname or alias.name for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module == module
            for alias in node.names if alias.name in names}


def _environment_uses(source: str) -> list[str]:
    """Every read or write of the process environment: os.environ, os.getenv and kin."""
    tree = ast.parse(source)
    found = [f"line {node.lineno}: {dotted(node)}" for node in ast.walk(tree)
             if isinstance(node, ast.Attribute) and node.attr in _ENVIRONMENT_NAMES
             and dotted(node.value) == "os"]
    imported = _aliases(tree, "os", _ENVIRONMENT_NAMES)
    found += [f"line {node.lineno}: {node.id} (from os)" for node in ast.walk(tree)
              if isinstance(node, ast.Name) and node.id in imported]
    return found


def _environment_writes(source: str) -> list[str]:
    """Assignments to os.environ[...] , del os.environ[...], os.environ.update(...), putenv."""
    tree = ast.parse(source)
    found = []
    for node in ast.walk(tree):
        targets: list[ast.AST] = []
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = list(node.targets) if isinstance(node, ast.Assign) else [node.target]
        elif isinstance(node, ast.Delete):
            targets = list(node.targets)
        found += [f"line {node.lineno}: writes {dotted(t.value)}[...]" for t in targets
                  if isinstance(t, ast.Subscript) and dotted(t.value) == "os.environ"]
        if isinstance(node, ast.Call):
            name = dotted(node.func)
            if name in ("os.putenv", "os.unsetenv") or (
                    name.startswith("os.environ.")
                    and name.rpartition(".")[2] in _ENVIRONMENT_WRITERS):
                found.append(f"line {node.lineno}: calls {name}")
    return found


def _threads_and_exit_hooks(source: str) -> list[str]:
    """Every threading.Thread(...) made, LoopThread(...) made, and atexit.register use."""
    tree = ast.parse(source)
    thread_names = {"threading.Thread", "LoopThread"} | _aliases(tree, "threading", {"Thread"})
    register_names = {"atexit.register"} | _aliases(tree, "atexit", {"register"})
    found = [f"line {node.lineno}: {dotted(node.func)}(...)" for node in ast.walk(tree)
             if isinstance(node, ast.Call) and dotted(node.func) in thread_names]
    found += [f"line {node.lineno}: {dotted(node)}" for node in ast.walk(tree)
              if isinstance(node, (ast.Attribute, ast.Name))
              and dotted(node) in register_names]
    return found


@pytest.mark.parametrize("path", [p for p in package_files()
                                  if not is_in(p, ENVIRONMENT_READERS)], ids=relative)
def test_only_the_runtime_reads_the_environment(path: Path) -> None:
    found = _environment_uses(path.read_text())

    assert found == [], (f"{relative(path)} reads the environment ({', '.join(found)}); "
                         "read it in asyncoll/_runtime/settings.py and pass it down")


@pytest.mark.parametrize("path", package_files(), ids=relative)
def test_no_module_writes_the_environment(path: Path) -> None:
    # A worker process gets its variables in the environment it is started with.
    found = _environment_writes(path.read_text())

    assert found == [], f"{relative(path)}: {', '.join(found)}"


@pytest.mark.parametrize("path", [p for p in package_files()
                                  if not is_in(p, THREAD_OWNERS)], ids=relative)
def test_only_the_runtime_starts_threads_and_registers_exit_hooks(path: Path) -> None:
    found = _threads_and_exit_hooks(path.read_text())

    assert found == [], (f"{relative(path)}: {', '.join(found)}; the runtime "
                         "(asyncoll/_runtime) owns threads and exit hooks")


def test_the_environment_reader_is_there_and_reads_it() -> None:
    assert _environment_uses((PACKAGE / "_runtime" / "settings.py").read_text()) != []


@pytest.mark.parametrize("source", [
    "import os\nx = os.environ.get('A')",
    "import os\nx = os.environ['A']",
    "import os\nx = os.getenv('A')",
    "import os\ndef f(environ=os.environ): pass",
    "from os import environ\nx = environ.get('A')",
    "from os import getenv as g\nx = g('A')",
])
def test_the_environment_linter_catches_reads(source: str) -> None:
    assert _environment_uses(source) != []


@pytest.mark.parametrize("source", [
    "import os\nos.environ['A'] = '1'",
    "import os\ndel os.environ['A']",
    "import os\nos.environ.update(A='1')",
    "import os\nos.environ.setdefault('A', '1')",
    "import os\nos.putenv('A', '1')",
])
def test_the_environment_linter_catches_writes(source: str) -> None:
    assert _environment_writes(source) != []


@pytest.mark.parametrize("source", ["import os\nos.getpid()", "env = dict(environ)",
                                    "import os\nx = os.path.join('a')"])
def test_the_environment_linter_allows_the_rest_of_os(source: str) -> None:
    assert _environment_uses(source) == []
    assert _environment_writes(source) == []


@pytest.mark.parametrize("source", [
    "import threading\nthreading.Thread(target=f).start()",
    "from threading import Thread\nThread(target=f)",
    "from threading import Thread as T\nT(target=f)",
    "LoopThread()",
    "import atexit\n@atexit.register\ndef f(): pass",
    "import atexit\natexit.register(f)",
    "from atexit import register\nregister(f)",
])
def test_the_thread_linter_catches_threads_and_exit_hooks(source: str) -> None:
    assert _threads_and_exit_hooks(source) != []


@pytest.mark.parametrize("source", ["import threading\nlock = threading.Lock()",
                                    "import threading\nthreading.current_thread()"])
def test_the_thread_linter_allows_locks(source: str) -> None:
    assert _threads_and_exit_hooks(source) == []
