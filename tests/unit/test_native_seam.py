"""The seam between the Python side and the compiled extension (asyncoll/_native).

asyncoll/_native/contract.py declares what both sides share; the extension's
contract() returns its own copies, built from its #defines, enums and tables
of names. These tests check that the two agree, that the compiled steps write
the layout the Python arena reads, that every attribute C reads or writes is
one its class has (a slot where C reads it in one), and that the contract's
values have no second home in Python. Then the C files, read as source: each
under 500 lines, saying what it mirrors, with no circle of includes, and with
its includes and the Python modules that use it pointing down the house's
layers (tests/unit/test_layers.py's).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import mmap
import re
import textwrap
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from asyncoll import _native
from asyncoll._native import contract
from asyncoll._transport.shm import arena as shm_arena
from asyncoll.types import ReduceOp
from tests.unit.test_layers import LAYERS

pytestmark = pytest.mark.timeout(60)

PACKAGE = Path(__file__).resolve().parents[2] / "asyncoll"
NATIVE = PACKAGE / "_native"

compiled = pytest.mark.skipif(_native.arena is None,
                              reason=f"the compiled extension is off: {_native.describe()}")


# -- the contract ---------------------------------------------------------------------------


def _as_sets(names: dict[str, tuple[str, ...]]) -> dict[str, set[str]]:
    return {owner: set(attributes) for owner, attributes in names.items()}


def _differences(theirs: dict[str, Any]) -> list[str]:
    """What the extension's contract() says otherwise than the Python contract."""
    found = [f"{name}: C has none" for name in contract.IN_C if name not in theirs]
    found += [f"{name}: the Python contract has none (add it to IN_C)" for name in theirs
              if name not in contract.IN_C]
    for name in contract.IN_C:
        if name not in theirs:
            continue
        ours, value = getattr(contract, name), theirs[name]
        if name in ("FIELDS", "ATTRIBUTES"):
            ours, value = _as_sets(ours), _as_sets(value)
            found += [f"{name}[{owner}]: Python {sorted(ours.get(owner, ()))}, "
                      f"C {sorted(value.get(owner, ()))}"
                      for owner in sorted(set(ours) | set(value))
                      if ours.get(owner) != value.get(owner)]
        elif ours != value:
            found.append(f"{name}: Python {ours!r}, C {value!r}")
    return found


@compiled
def test_the_extension_holds_every_shared_value_as_the_contract_declares_it() -> None:
    assert _differences(_native.arena.contract()) == []


def test_the_contract_check_names_a_value_changed_on_one_side() -> None:
    theirs = {name: getattr(contract, name) for name in contract.IN_C}
    assert _differences(theirs) == []
    theirs["WAITING"] = 7
    theirs["FIELDS"] = {**contract.FIELDS, "asyncoll._group.runner.Runner": ("seq",)}
    del theirs["ALIGN"]
    theirs["EXTRA"] = 1
    assert _differences(theirs) == [
        "ALIGN: C has none", "EXTRA: the Python contract has none (add it to IN_C)",
        "WAITING: Python 1, C 7", "FIELDS[asyncoll._group.runner.Runner]: Python "
        "['_seq', 'finished', 'handed', 'run_fingerprint'], C ['seq']"]


def test_a_kind_is_a_type_code_times_ops_plus_the_reduce_ops_value() -> None:
    assert [op.name for op in sorted(ReduceOp, key=lambda op: op.value)] == list(
        contract.REDUCE_OPS)
    assert [ReduceOp[name].value for name in contract.REDUCE_OPS] == list(range(contract.OPS))
    assert [np.dtype(name).name for name in contract.TYPES] == list(contract.TYPES)
    assert _native.kind(np.dtype("float32"), ReduceOp.MAX) in (
        None, contract.TYPES.index("float32") * contract.OPS + ReduceOp.MAX.value)


@compiled
def test_every_kind_the_extension_has_is_a_type_and_an_op_of_the_contract() -> None:
    kinds = _native.arena.kinds()
    assert kinds and all(0 <= kind < len(contract.TYPES) * contract.OPS for kind in kinds)


# -- the layout -----------------------------------------------------------------------------

LAYOUT = ("LINE_BYTES", "LINE_WORDS", "PUBLISHED", "PID", "ABANDONED", "ABANDONED_CODE",
          "ABANDONED_RANK", "SLEEPING", "PROCESSOR", "ABANDONED_MS", "FINGERPRINTS",
          "FINGERPRINT_WORDS", "ALIGN", "BRIEF_YIELDS")


def test_the_arena_sizes_its_lines_and_slots_by_the_contracts_layout() -> None:
    source = inspect.getsource(shm_arena)
    assigned = {target.id for node in ast.parse(source).body if isinstance(node, ast.Assign)
                for target in node.targets if isinstance(target, ast.Name)}
    assert assigned & set(LAYOUT) == set()
    assert shm_arena.arena_bytes(3, 100) == 3 * contract.LINE_BYTES + 2 * 3 * contract.ALIGN
    assert shm_arena.CHECK_EVERY == contract.BRIEF_YIELDS
    assert contract.LINE_WORDS * 8 == contract.LINE_BYTES
    fields = [contract.PUBLISHED, contract.PID, contract.ABANDONED, contract.ABANDONED_CODE,
              contract.ABANDONED_RANK, contract.SLEEPING, contract.PROCESSOR,
              contract.ABANDONED_MS]
    fields += [start + k for start in contract.FINGERPRINTS
               for k in range(contract.FINGERPRINT_WORDS)]
    assert len(set(fields)) == len(fields) and max(fields) < contract.LINE_WORDS


@compiled
def test_the_compiled_core_writes_the_layout_the_python_arena_reads() -> None:
    slot = 256
    memory = mmap.mmap(-1, shm_arena.arena_bytes(2, slot))
    python_side = shm_arena.Arena(memory, 2, 0, slot)
    theirs = _native.arena.Core(memory, 2, 1, slot)
    fingerprint = (1, 2, 3, 4, 5, 6)
    theirs.publish(3, fingerprint)  # phase 3: operation 2's input, the fingerprints' set 0
    words = memoryview(memory).cast("q")
    line = contract.LINE_WORDS  # member 1's
    at = line + contract.FINGERPRINTS[0]
    assert words[line + contract.PUBLISHED] == 3
    assert tuple(words[at:at + contract.FINGERPRINT_WORDS]) == fingerprint
    assert tuple(python_side.fingerprint(1, 2)) == fingerprint
    words.release()
    theirs.release()
    python_side.core.release()


# -- the attributes C reads and writes ----------------------------------------------------


def _owner(path: str) -> Any:
    """The class (or module) the contract names by its dotted path."""
    try:
        return importlib.import_module(path)
    except ModuleNotFoundError:
        module, _, name = path.rpartition(".")
        return getattr(importlib.import_module(module), name)


def _set_in_init(cls: type, name: str) -> bool:
    """Whether `cls.__init__` sets `self.<name>`."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls.__init__)))
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, ast.AnnAssign) else []
        for target in targets:
            if isinstance(target, ast.Attribute) and target.attr == name \
                    and isinstance(target.value, ast.Name) and target.value.id == "self":
                return True
    return False


def _missing(fields: dict[str, tuple[str, ...]],
             attributes: dict[str, tuple[str, ...]]) -> list[str]:
    """The attributes named that their class (or module) does not have: a field must be a
    slot (a member descriptor), an attribute anything the class or its __init__ makes."""
    found = []
    for path, names in fields.items():
        owner = _owner(path)
        for name in names:
            held = inspect.getattr_static(owner, name, None)
            if not isinstance(held, types.MemberDescriptorType):
                found.append(f"{path}.{name} is not a slot")
    for path, names in attributes.items():
        owner = _owner(path)
        for name in names:
            if not (hasattr(owner, name)
                    or isinstance(owner, type) and _set_in_init(owner, name)):
                found.append(f"{path}.{name} is not an attribute")
    return found


def test_every_attribute_c_touches_is_one_its_class_has() -> None:
    assert _missing(contract.FIELDS, contract.ATTRIBUTES) == []


def test_the_attribute_check_names_a_renamed_slot_and_attribute() -> None:
    found = _missing({"asyncoll._group.runner.Runner": ("_seq", "seq")},
                     {"asyncoll._group.runner.Runner": ("recorder", "recording"),
                      "asyncoll._api.world": ("current", "now")})
    assert found == ["asyncoll._group.runner.Runner.seq is not a slot",
                     "asyncoll._group.runner.Runner.recording is not an attribute",
                     "asyncoll._api.world.now is not an attribute"]


def _literal(node: ast.AST | None) -> bool:
    """Whether `node` is made of constants alone (`0`, `(8, 16)`, `256 << 10`)."""
    return node is not None and all(not isinstance(n, (ast.Name, ast.Call, ast.Attribute))
                                    for n in ast.walk(node))


def _top_level_assignments(path: Path) -> set[str]:
    """The names a module's top level sets to constants."""
    names = set()
    for node in ast.parse(path.read_text()).body:
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, ast.AnnAssign) else []
        if not _literal(getattr(node, "value", None)):
            continue
        for target in targets:
            elements = target.elts if isinstance(target, ast.Tuple) else [target]
            names |= {e.id for e in elements if isinstance(e, ast.Name)}
    return names


def test_no_module_declares_a_shared_value_again() -> None:
    shared = set(contract.IN_C) | set(LAYOUT)
    again = {str(path.relative_to(PACKAGE)): sorted(_top_level_assignments(path) & shared)
             for path in sorted(PACKAGE.rglob("*.py")) if path != NATIVE / "contract.py"}
    assert {path: names for path, names in again.items() if names} == {}


# -- the C files ----------------------------------------------------------------------------

#: Each C file's layer (its .c and .h together), by what it mirrors on the Python side:
#: contract.h the contract (asyncoll._native), field.c Python's attribute protocol (the
#: bottom), core.c the arena (_transport), reduce.c, copies.c and steps.c the reductions,
#: the slots' copies and the steps (_algorithms), lock.c and express*.c the group's arena
#: path and its compiled entry (_group), front.c the blocking API (_api); module.c
#: registers them all: above all.
C_LAYERS = {"contract": 0, "field": 0, "place": 1, "core": 1, "copies": 2, "reduce": 2,
            "steps": 2, "lock": 3, "express": 3, "express_type": 3, "front": 5,
            "module": max(LAYERS.values()) + 1}
MAX_C_LINES = 500


def _c_files() -> list[Path]:
    return sorted(NATIVE.glob("*.[ch]"))


def _includes(text: str) -> list[str]:
    """The stems of the package's own headers a C file includes."""
    return [Path(name).stem for name in re.findall(r'^#include "([^"]+)"', text, re.M)]


def _graph(sources: dict[str, str]) -> dict[str, set[str]]:
    """Each C file's stem (its .c and .h as one) and the stems it includes."""
    graph: dict[str, set[str]] = {}
    for name, text in sources.items():
        stem = Path(name).stem
        graph.setdefault(stem, set()).update(set(_includes(text)) - {stem})
    return graph


def _circle(graph: dict[str, set[str]]) -> list[str] | None:
    """A circle of includes (its files in order, the first again at the end), or None."""
    done: set[str] = set()

    def visit(node: str, path: list[str]) -> list[str] | None:
        if node in path:
            return path[path.index(node):] + [node]
        if node in done:
            return None
        for target in sorted(graph.get(node, ())):
            found = visit(target, path + [node])
            if found is not None:
                return found
        done.add(node)
        return None

    for node in sorted(graph):
        found = visit(node, [])
        if found is not None:
            return found
    return None


def _sources() -> dict[str, str]:
    return {path.name: path.read_text() for path in _c_files()}


@pytest.mark.parametrize("path", _c_files(), ids=lambda p: p.name)
def test_no_c_file_is_over_500_lines(path: Path) -> None:
    lines = len(path.read_text().splitlines())

    assert lines < MAX_C_LINES, f"{path.name} has {lines} lines; split it by what it does"


@pytest.mark.parametrize("path", _c_files(), ids=lambda p: p.name)
def test_each_c_file_starts_saying_what_it_mirrors_on_the_python_side(path: Path) -> None:
    head = path.read_text().split("*/")[0]
    named = re.findall(r"asyncoll/[\w/]+\.py", head)

    assert head.startswith("/* Mirrors "), f"{path.name}'s first comment says what it mirrors"
    assert path.stem == "field" or named, f"{path.name}'s first comment names a Python file"
    assert [name for name in named if not (PACKAGE.parent / name).exists()] == []


def test_the_c_include_graph_has_no_circle() -> None:
    graph = _graph(_sources())

    assert set(graph) == set(C_LAYERS), "every C file has a layer, and every layer a file"
    assert _circle(graph) is None


def test_the_circle_rule_finds_a_circle_and_passes_a_chain() -> None:
    circle = {"module.c": '#include "core.h"\n', "core.c": '#include "steps.h"\n',
              "steps.c": '#include "core.h"\n'}
    assert _circle(_graph(circle)) == ["core", "steps", "core"]
    assert _circle(_graph({"steps.c": '#include "core.h"\n', "core.c": '#include "core.h"\n',
                           "module.c": '#include "steps.h"\n#include "core.h"\n'})) is None


def _upward_includes(sources: dict[str, str]) -> list[str]:
    found = []
    for name, text in sorted(sources.items()):
        own = C_LAYERS[Path(name).stem]
        found += [f"{name} ({own}) includes {stem}.h ({C_LAYERS[stem]})"
                  for stem in _includes(text) if C_LAYERS[stem] > own]
    return found


def test_c_files_include_only_headers_of_their_own_or_lower_layers() -> None:
    assert _upward_includes(_sources()) == []


def test_the_c_layer_rule_catches_an_upward_include() -> None:
    assert _upward_includes({"core.c": '#include "core.h"\n#include "express.h"\n'}) == [
        "core.c (1) includes express.h (3)"]


@pytest.mark.parametrize("path", [p for p in _c_files() if p.suffix == ".c"],
                         ids=lambda p: p.name)
def test_a_c_file_uses_another_files_functions_through_its_header(path: Path) -> None:
    # An extern declaration in a .c file would hide a dependency from the include graph.
    assert re.findall(r"^extern .*", path.read_text(), re.M) == []


# -- the Python modules that use the extension ---------------------------------------------


def _definer(pattern: str, sources: dict[str, str]) -> str:
    """The stem of the one C file whose text matches `pattern` (a definition)."""
    found = [Path(name).stem for name, text in sources.items()
             if name.endswith(".c") and re.search(pattern, text, re.M)]
    assert len(found) == 1, f"{pattern!r} is defined in {found}"
    return found[0]


def _registered_layers(sources: dict[str, str]) -> dict[str, int]:
    """Each name the module offers (its types and functions), and the layer of the C file
    that defines it (module.c registers them)."""
    module = sources["module.c"]
    layers = {}
    for name, type_name in re.findall(
            r'PyModule_AddObject\(module, "(\w+)", \(PyObject \*\)&(\w+)\)', module):
        layers[name] = C_LAYERS[_definer(rf"^PyTypeObject {type_name} = ", sources)]
    for name, function in re.findall(
            r'\{"(\w+)", \(PyCFunction\)(?:\(void \(\*\)\(void\)\))?(\w+),', module):
        layers[name] = C_LAYERS[_definer(rf"^(?:static )?PyObject \*{function}\(", sources)]
    return layers


def _python_layer(module: str) -> int:
    """The module's layer (the package's __init__, in none, is above them all)."""
    best = max((p for p in LAYERS if module == p or module.startswith(p + ".")), key=len,
               default=None)
    return LAYERS[best] if best is not None else max(LAYERS.values()) + 1


def _uses(source: str) -> set[str]:
    """The names of the extension a module uses: `_native.arena.<name>`, or
    `<alias>.<name>` where it imports the extension as `alias`."""
    names = set(re.findall(r"\b_native\.arena\.(\w+)", source))
    for alias in re.findall(r"^from asyncoll\._native import arena as (\w+)$", source, re.M):
        names |= set(re.findall(rf"\b{alias}\.(\w+)", source))
    return names


def _uses_below(source: str, module: str, layers: dict[str, int]) -> list[str]:
    own = _python_layer(module)
    return [f"{module} ({own}) uses {name} ({layers[name]})"
            for name in sorted(_uses(source)) if name in layers and layers[name] > own]


def test_the_module_offers_each_type_and_function_from_a_file_of_its_layer() -> None:
    layers = _registered_layers(_sources())

    assert layers == {"Core": 1, "Express": 3, "PathLock": 3, "Front": 5, "kinds": 2,
                      "reduce": 2, "contract": C_LAYERS["module"]}


def test_python_modules_use_the_extension_only_at_or_above_each_names_layer() -> None:
    layers = _registered_layers(_sources())
    # asyncoll._native itself loads the extension; every other user is checked.
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if NATIVE in path.parents:
            continue
        module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        found += _uses_below(path.read_text(), module, layers)
    assert found == []


def test_the_use_rule_catches_the_transport_using_the_compiled_entry() -> None:
    source = "from asyncoll._native import arena as native\nnative.Core\nnative.Express\n"
    layers = {"Core": 1, "Express": 3}
    assert _uses_below(source, "asyncoll._transport.shm.arena", layers) == [
        "asyncoll._transport.shm.arena (1) uses Express (3)"]
    assert _uses_below("_native.arena.Front(f)\n", "asyncoll._api.front", {"Front": 5}) == []
