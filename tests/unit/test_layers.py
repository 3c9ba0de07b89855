"""Linters run as tests: the public __all__ lists, and imports pointing one way, downwards."""

from __future__ import annotations

import ast
import re
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

import asyncoll

pytestmark = pytest.mark.timeout(60)

PACKAGE = Path(asyncoll.__file__).resolve().parent

# asyncio's stream API opens sockets; pure layers must not reach for it.
ASYNCIO_STREAM_NAMES = {"StreamReader", "StreamWriter", "StreamReaderProtocol",
                        "open_connection", "start_server", "open_unix_connection",
                        "start_unix_server", "streams"}


def _from_base(node: ast.ImportFrom, module: str) -> str:
    """The absolute module a from-import in ``module`` imports from."""
    base = node.module or ""
    if node.level:
        parts = module.rsplit(".", 1)[0].split(".")
        parent = ".".join(parts[:len(parts) - node.level + 1])
        base = f"{parent}.{base}" if base else parent
    return base


def _imports(tree: ast.AST, module: str) -> set[str]:
    """Every module name (and module.name for from-imports) the source imports."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _from_base(node, module)
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
                                    "asyncoll.coordinator", "asyncoll._group.tensors",
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


# -- the coordinator loads no data plane -----------------------------------------------

# What the daemon may import: the wire format, the rendezvous state machine and its
# control-message framing (not the peer-side client), errors, settings, the asyncio
# compatibility shims, the shared secret's challenge-response (_auth), TLS, and the
# version and the commands' output (which import only the standard library).
COORDINATOR_MAY_IMPORT = ("asyncoll._wire", "asyncoll._rendezvous", "asyncoll.errors",
                          "asyncoll._defaults", "asyncoll._compat", "asyncoll._auth",
                          "asyncoll._tls", "asyncoll._version", "asyncoll._stdout",
                          "asyncoll.coordinator")
COORDINATOR_MAY_NOT_IMPORT = ("asyncoll._rendezvous.client",)

# The data plane, by name, as the issue lists it.
DATA_PLANE = ("asyncoll._api.blocking", "asyncoll.group", "asyncoll._group.core",
              "asyncoll._runtime.session", "asyncoll._transport", "asyncoll._algorithms",
              "asyncoll.aio", "asyncoll._torch_backend", "asyncoll._group.tensors")


def _within(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == prefix or name.startswith(f"{prefix}.") for prefix in prefixes)


def _coordinator_may_import(name: str) -> bool:
    # The bare package is the base of `from asyncoll import _auth`; what such an
    # import names comes along as asyncoll._auth and is judged on its own.
    if name == "asyncoll":
        return True
    return _within(name, COORDINATOR_MAY_IMPORT) and not _within(name,
                                                                  COORDINATOR_MAY_NOT_IMPORT)


def _python(code: str) -> str:
    """What a fresh interpreter prints running ``code``."""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    return result.stdout


def _loaded_by(statement: str) -> list[str]:
    """The asyncoll modules a fresh interpreter holds after running ``statement``."""
    return _python(f"{statement}\nimport sys\n"
                   "print('\\n'.join(sorted(m for m in sys.modules "
                   "if m == 'asyncoll' or m.startswith('asyncoll.'))))").split()


@pytest.mark.parametrize("path", _files("coordinator"),
                         ids=lambda p: str(p.relative_to(PACKAGE)))
def test_coordinator_module_imports_only_wire_rendezvous_errors_and_settings(
        path: Path) -> None:
    bad = sorted(n for n in _asyncoll_imports_of(path) if not _coordinator_may_import(n))
    plain = [alias.name for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, ast.Import) for alias in node.names
             if alias.name == "asyncoll"]

    assert bad == [], f"{path.relative_to(PACKAGE.parent)} imports {bad}"
    assert plain == [], f"{path.relative_to(PACKAGE.parent)} imports the asyncoll package"


@pytest.mark.parametrize("name", ["asyncoll._transport.tcp.mesh", "asyncoll._algorithms",
                                  "asyncoll._runtime.session", "asyncoll.group",
                                  "asyncoll._api.blocking", "asyncoll.all_reduce", "asyncoll.aio",
                                  "asyncoll._rendezvous.client",
                                  "asyncoll._rendezvous.client.RendezvousClient",
                                  "asyncoll._wiremesh", "asyncoll.errors_extra"])
def test_the_coordinator_import_rule_refuses_the_data_plane(name: str) -> None:
    assert not _coordinator_may_import(name)


@pytest.mark.parametrize("name", ["asyncoll", "asyncoll._wire.messages.Challenge",
                                  "asyncoll._rendezvous.state", "asyncoll.errors",
                                  "asyncoll._defaults.DEFAULT_PORT", "asyncoll._compat",
                                  "asyncoll._auth", "asyncoll.coordinator.server"])
def test_the_coordinator_import_rule_allows_the_control_plane(name: str) -> None:
    assert _coordinator_may_import(name)


def test_importing_the_coordinator_loads_no_module_of_the_data_plane() -> None:
    # Every module of the daemon (its __main__ only runs cli.main).
    loaded = _loaded_by("import asyncoll.coordinator, asyncoll.coordinator.cli, "
                        "asyncoll.coordinator.server")

    data_plane = [name for name in loaded if _within(name, DATA_PLANE)]
    assert data_plane == [], f"import asyncoll.coordinator loaded {data_plane}"
    # What else it loads is the control plane the daemon may import, and the two
    # cheap faces asyncoll/__init__ binds eagerly.
    others = [name for name in loaded if not _coordinator_may_import(name)
              and name not in ("asyncoll.errors", "asyncoll.types")]
    assert others == [], f"import asyncoll.coordinator loaded {others}"


def test_importing_asyncoll_defers_the_blocking_api_to_its_first_use() -> None:
    assert _loaded_by("import asyncoll") == ["asyncoll", "asyncoll._version", "asyncoll.errors",
                                             "asyncoll.types"]
    assert "asyncoll._api.blocking" in _loaded_by("import asyncoll\nasyncoll.all_reduce")


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
    missing_from_dir, wrong = json.loads(_python(script))

    assert len(functions) >= 30
    assert {name for name, _, _ in faces} >= set(asyncoll.__all__)
    assert wrong == [], f"asyncoll.<name> is not the defining module's object for {wrong}"
    assert missing_from_dir == [], f"dir(asyncoll) lacks {missing_from_dir}"


def test_unknown_attribute_raises_attribute_error_naming_it() -> None:
    with pytest.raises(AttributeError, match="'asyncoll' has no attribute 'all_reduse'"):
        asyncoll.all_reduse
    with pytest.raises(ImportError, match="all_reduse"):
        from asyncoll import all_reduse  # noqa: F401


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
    "asyncoll.testing": 5, "asyncoll.torchft": 5,
    "asyncoll.run": 6, "asyncoll._relay": 6, "asyncoll.bench": 6, "asyncoll.cli": 6,
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
    names = {n for n in _imports(ast.parse(source), module) if n.startswith("asyncoll.")}
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
    assert _upward_imports(path.read_text(), _module_name(path)) == []


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


_GROUP_WORDS = [r"\bregister_group\b", r"\babort_group\b", r"\bgroup_error\b",
                r"\bbegin\(", r"\bcomplete\(", r"\b_broken_groups\b", r"\b_running\b",
                r"\b_completed\b", r"\bGroupFaults\b"]


@pytest.mark.parametrize("path", _files("_transport"), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_the_transport_knows_peers_and_tags_not_groups_or_operations(path: Path) -> None:
    # Groups and operations are the group layer's: no transport module may name what
    # decides them (membership, the running operation, breaking a group, ABORT relays).
    source = path.read_text()
    named = [word for word in _GROUP_WORDS if re.search(word, source)]
    assert named == [], f"{path.relative_to(PACKAGE.parent)} names {named}"


def test_the_group_word_rule_catches_the_old_mesh() -> None:
    old = "def register_group(self, group_id, ranks):\n    self._broken_groups = {}"
    assert [w for w in _GROUP_WORDS if re.search(w, old)] != []
    assert not [w for w in _GROUP_WORDS if re.search(w, "asyncio.get_running_loop()")]


def _identifiers(node: ast.AST) -> list[str]:
    """The names a node binds or reads: variables, attributes, definitions, arguments,
    keywords and imports."""
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Attribute):
        return [node.attr]
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, ast.arg):
        return [node.arg]
    if isinstance(node, ast.keyword):
        return [node.arg] if node.arg else []
    if isinstance(node, ast.alias):
        return [node.name] + ([node.asname] if node.asname else [])
    if isinstance(node, ast.ImportFrom):
        return [node.module] if node.module else []
    if isinstance(node, (ast.Global, ast.Nonlocal)):
        return list(node.names)
    return []


def _text(node: ast.AST) -> str:
    """The literal text of a string argument, f-strings' fixed parts included."""
    return " ".join(part.value for part in ast.walk(node)
                    if isinstance(part, ast.Constant) and isinstance(part.value, str))


def _group_names(source: str) -> list[str]:
    """Every identifier naming a group, and every MismatchError worded about one."""
    tree = ast.parse(source)
    found = []
    for node in ast.walk(tree):
        line = getattr(node, "lineno", "?")
        found += [f"line {line}: {name}" for name in _identifiers(node)
                  if "group" in name.lower()]
        if isinstance(node, ast.Call) and _dotted(node.func).endswith("MismatchError"):
            words = " ".join(_text(argument) for argument in [*node.args, *node.keywords])
            if "group" in words.lower():
                found.append(f"line {line}: a MismatchError worded about a group")
    return found


@pytest.mark.parametrize("path", _files("_transport"), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_the_transport_names_no_group_and_words_no_group_error(path: Path) -> None:
    # A tag's first field is a channel to the transport: what it stands for (a
    # group, a group's point-to-point traffic) and how a frame that does not fit
    # is explained are the group layer's (asyncoll._group.mismatch, through the
    # mesh's Listener). Prose may mention groups; names and errors may not.
    found = _group_names(path.read_text())

    assert found == [], f"{path.relative_to(PACKAGE.parent)}: {', '.join(found)}"


@pytest.mark.parametrize("source", [
    "def fail_group(self, group, error): pass",
    "def fail(self, error, channel=None):\n    self._failed_groups[channel] = error",
    "def f(mesh):\n    mesh.fail(error, group=3)",
    "class TagGroup: pass",
    "from asyncoll._group.mismatch import desync",
    "from asyncoll._transport.inbox import left_error as group_left",
    "def f(tag):\n    return MismatchError(f'operation #{tag[1]} of group {tag[0]} differs')",
    "def f(tag):\n    return errors.MismatchError(msg='size on group ' + str(tag[0]))",
])
def test_the_group_name_rule_catches_the_old_transport(source: str) -> None:
    assert _group_names(source) != []


@pytest.mark.parametrize("source", [
    "def fail_channel(self, channel, error):\n    self._failed_channels[channel] = error",
    "def f(peer, tag):\n    return MismatchError(f'rank {peer} sent frame {tag}')",
    "# the group layer decides\nx = 1",
    'def f():\n    """Fail the receives of a broken group."""',
    "error = ClosedError('the process group was destroyed')",
])
def test_the_group_name_rule_allows_channels_and_prose(source: str) -> None:
    assert _group_names(source) == []


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


def _dotted(node: ast.AST) -> str:
    """``a.b.c`` for a Name or an Attribute chain, else ""."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return ""
    parts.append(node.id)
    return ".".join(reversed(parts))


def _aliases(tree: ast.AST, module: str, names: set[str]) -> set[str]:
    """Local names bound by ``from module import name`` (or ``as``) for ``names``."""
    return {alias.asname or alias.name for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module == module
            for alias in node.names if alias.name in names}


def _environment_uses(source: str) -> list[str]:
    """Every read or write of the process environment: os.environ, os.getenv and kin."""
    tree = ast.parse(source)
    found = [f"line {node.lineno}: {_dotted(node)}" for node in ast.walk(tree)
             if isinstance(node, ast.Attribute) and node.attr in _ENVIRONMENT_NAMES
             and _dotted(node.value) == "os"]
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
        found += [f"line {node.lineno}: writes {_dotted(t.value)}[...]" for t in targets
                  if isinstance(t, ast.Subscript) and _dotted(t.value) == "os.environ"]
        if isinstance(node, ast.Call):
            name = _dotted(node.func)
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
    found = [f"line {node.lineno}: {_dotted(node.func)}(...)" for node in ast.walk(tree)
             if isinstance(node, ast.Call) and _dotted(node.func) in thread_names]
    found += [f"line {node.lineno}: {_dotted(node)}" for node in ast.walk(tree)
              if isinstance(node, (ast.Attribute, ast.Name))
              and _dotted(node) in register_names]
    return found


def _package_files() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _relative(path: Path) -> str:
    return path.relative_to(PACKAGE).as_posix()


def _is_in(path: Path, places: tuple[str, ...]) -> bool:
    name = _relative(path)
    return any(name.startswith(place) if place.endswith("/") else name == place
               for place in places)


@pytest.mark.parametrize("path", [p for p in _package_files()
                                  if not _is_in(p, ENVIRONMENT_READERS)], ids=_relative)
def test_only_the_runtime_reads_the_environment(path: Path) -> None:
    found = _environment_uses(path.read_text())

    assert found == [], (f"{_relative(path)} reads the environment ({', '.join(found)}); "
                         "read it in asyncoll/_runtime/settings.py and pass it down")


@pytest.mark.parametrize("path", _package_files(), ids=_relative)
def test_no_module_writes_the_environment(path: Path) -> None:
    # A worker process gets its variables in the environment it is started with.
    found = _environment_writes(path.read_text())

    assert found == [], f"{_relative(path)}: {', '.join(found)}"


@pytest.mark.parametrize("path", [p for p in _package_files()
                                  if not _is_in(p, THREAD_OWNERS)], ids=_relative)
def test_only_the_runtime_starts_threads_and_registers_exit_hooks(path: Path) -> None:
    found = _threads_and_exit_hooks(path.read_text())

    assert found == [], (f"{_relative(path)}: {', '.join(found)}; the runtime "
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


# The transport is told its settings (asyncoll._transport.settings); nothing below the
# runtime reaches up to it, or to the faces above.
LOWER_LAYERS = ("_wire", "_transport", "_algorithms", "_rendezvous")
UPPER_LAYERS = ("asyncoll._runtime", "asyncoll._runtime.session", "asyncoll._group.core",
                "asyncoll.group", "asyncoll.aio", "asyncoll._api.blocking",
                "asyncoll._torch_backend", "asyncoll.testing")


@pytest.mark.parametrize("path", [p for layer in LOWER_LAYERS for p in _files(layer)],
                         ids=_relative)
def test_lower_layers_import_nothing_above_them(path: Path) -> None:
    bad = sorted(n for n in _asyncoll_imports_of(path) if _within(n, UPPER_LAYERS))

    assert bad == [], f"{_relative(path)} imports {bad}"


# -- the group layer's shape (issue 26) ---------------------------------------------------

#: The longest a module of the package may be: past it, a file does several things.
MAX_LINES = 500


@pytest.mark.parametrize("path", _package_files(), ids=_relative)
def test_no_module_is_over_500_lines(path: Path) -> None:
    lines = len(path.read_text().splitlines())

    assert lines <= MAX_LINES, f"{_relative(path)} has {lines} lines; split it by what it does"


#: The front doors: they convert arguments and hand plans to the group's execute or submit.
FRONT_DOORS = [p for p in _package_files()
               if _is_in(p, ("_api/", "_torch_backend/", "aio.py", "testing.py"))]
#: What decides where a plan runs, and how: the group's business only.
PLACEMENT_MODULES = ("asyncoll._group.runner", "asyncoll._group.fast_path",
                     "asyncoll._group.arena_path", "asyncoll._group.links_path",
                     "asyncoll._group.hierarchy",
                     "asyncoll._group.transports", "asyncoll._transport.link_mesh")
PLACEMENT_NAMES = {"run_here", "to_loop", "run_again", "remember", "in_turn", "on_fast_path",
                   "_runner", "_fast", "_repeats", "_ran_here", "kernel"}


def _placement_uses(source: str, module: str) -> list[str]:
    tree = ast.parse(source)
    found = [f"imports {name}" for name in sorted(_imports(tree, module))
             if _within(name, PLACEMENT_MODULES)]
    found += sorted({f"uses .{node.attr}" for node in ast.walk(tree)
                     if isinstance(node, ast.Attribute) and node.attr in PLACEMENT_NAMES})
    return found


def test_the_front_doors_are_found() -> None:
    assert {"blocking.py", "process_group.py", "aio.py"} <= {p.name for p in FRONT_DOORS}


@pytest.mark.parametrize("path", FRONT_DOORS, ids=_relative)
def test_front_doors_never_place_operations_themselves(path: Path) -> None:
    # The group alone decides where a plan runs (GroupCore.execute, .submit, .again).
    found = _placement_uses(path.read_text(), _module_name(path))

    assert found == [], f"{_relative(path)}: {', '.join(found)}"


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
            base = _from_base(node, module)
            for alias in node.names:
                whole = f"{base}.{alias.name}"
                found.add(whole if _source_of(whole) is not None else base)
    return {name for name in found
            if _within(name, ("asyncoll",)) and _source_of(name) is not None}


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
    graph = {_module_name(path): _module_edges(path.read_text(), _module_name(path))
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
    names = _imports(ast.parse(path.read_text()), _module_name(path))

    assert sorted(n for n in names if _within(n, ("asyncoll._group.hierarchy",
                                                  "asyncoll._transport.shm",
                                                  "asyncoll._group.arena_path"))) == []


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
    for path in _package_files():
        module = _module_name(path)
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
