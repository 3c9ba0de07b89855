"""Linters run as tests: the transport knows peers and tags, never groups or operations."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from ._source import PACKAGE, dotted, files

pytestmark = pytest.mark.timeout(60)


_GROUP_WORDS = [r"\bregister_group\b", r"\babort_group\b", r"\bgroup_error\b",
                r"\bbegin\(", r"\bcomplete\(", r"\b_broken_groups\b", r"\b_running\b",
                r"\b_completed\b", r"\bGroupFaults\b"]


@pytest.mark.parametrize("path", files("_transport"), ids=lambda p: str(p.relative_to(PACKAGE)))
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
        if isinstance(node, ast.Call) and dotted(node.func).endswith("MismatchError"):
            words = " ".join(_text(argument) for argument in [*node.args, *node.keywords])
            if "group" in words.lower():
                found.append(f"line {line}: a MismatchError worded about a group")
    return found


@pytest.mark.parametrize("path", files("_transport"), ids=lambda p: str(p.relative_to(PACKAGE)))
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
