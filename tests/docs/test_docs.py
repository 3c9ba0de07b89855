"""Every code block of the READMEs and of docs/ runs, or says why not; and the site builds.

A fenced block's language says what it is. ``python`` is a program, run as a
script; ``bash`` and ``sh`` run in bash (``set -euo pipefail``); ``console``
is a transcript, whose ``$ `` lines run in bash. Any other language (``text``,
``yaml``, ...) is shown, not run. A fence without a language fails the test:
say what the block is. An HTML comment on the line right before a block
steers it, options separated by commas::

    <!-- doc-test: skip, because REASON -->  not run; a reason is required
    <!-- doc-test: ranks=N -->  (python) run under asyncoll-run --nproc-per-node N
    <!-- doc-test: torch -->  skipped where torch is not installed; a block that
                              imports torch or passes --torch needs no marker
    <!-- doc-test: torch=2.14 -->  skipped where torch is older than that
    <!-- doc-test: needs=MODULE -->  skipped where MODULE (torchft, say) is not installed
    <!-- doc-test: port=P -->  every P in the block becomes a free port first

So a block nobody marked is run, and one that cannot run fails here. Each
block runs from the repository root (``examples/...`` resolve), with the
interpreter's own scripts first on PATH and no launcher variables inherited.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
#: The pages whose blocks run: the READMEs (the repository's, and those of the
#: coordinator's and the worker's images) and the docs site's pages.
READMES = [REPO / "README.md", REPO / "server" / "README.md", REPO / "client" / "README.md"]
PAGES = [*READMES, *sorted((REPO / "docs").rglob("*.md"))]
#: Languages that run; everything else is shown only.
RUNNABLE = {"python", "bash", "sh", "console"}
#: Limit on one block (all its processes); test limits sit above it, so a stuck
#: block is killed and reported by the test itself.
BLOCK_TIMEOUT_S = 120
BUILD_TIMEOUT_S = 240
#: Variables a launcher sets; none may leak from the environment running the tests.
LAUNCH_VARIABLES = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK",
                    "LOCAL_WORLD_SIZE", "ASYNCOLL_JOB_ID", "ASYNCOLL_COORDINATOR")

FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})\s*(?P<lang>[\w+-]*)\s*$")
MARKER = re.compile(r"^\s*<!--\s*doc-test:\s*(?P<options>.*?)\s*-->\s*$")
SKIP = re.compile(r"^skip,\s*because\s+(?P<reason>\S.*)$", re.DOTALL)
NEEDS_TORCH = re.compile(r"^\s*(import|from)\s+torch\b|--torch\b", re.MULTILINE)
HAS_TORCH = importlib.util.find_spec("torch") is not None


@dataclass
class Block:
    """One fenced code block of a page, with what its marker asks."""

    page: Path
    line: int  # of the opening fence, 1-based
    lang: str
    code: str
    skip: str | None = None
    ranks: int | None = None
    torch: bool = False
    #: The oldest torch the block runs on, as (major, minor); None: any.
    torch_at_least: tuple[int, int] | None = None
    ports: list[str] = field(default_factory=list)
    #: Modules the block needs beyond torch; it is skipped where one is not installed.
    needs: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"

    @property
    def runs(self) -> bool:
        return self.lang in RUNNABLE and self.skip is None and not self.problems


def _read_marker(block: Block, options: str) -> None:
    """Apply a doc-test marker's options to ``block``, noting any it does not understand."""
    skip = SKIP.match(options)
    if skip:
        block.skip = skip["reason"]
        return
    if options.startswith("skip"):
        block.problems.append("a skip marker must say why: <!-- doc-test: skip, because ... -->")
        return
    for option in (o.strip() for o in options.split(",")):
        name, _, value = option.partition("=")
        if name == "torch" and not value:
            block.torch = True
        elif name == "torch" and re.fullmatch(r"\d+\.\d+", value):
            block.torch = True
            major, minor = value.split(".")
            block.torch_at_least = (int(major), int(minor))
        elif name == "ranks" and value.isdigit() and int(value) >= 1:
            block.ranks = int(value)
        elif name == "port" and value.isdigit():
            block.ports.append(value)
        elif name == "needs" and re.fullmatch(r"[A-Za-z_][\w.]*", value):
            block.needs.append(value)
        else:
            block.problems.append(f"unknown doc-test option {option!r}")
    if block.ranks is not None and block.lang != "python":
        block.problems.append("ranks= applies to python blocks only")


def _closes(line: str, fence: str) -> bool:
    """Whether ``line`` closes a block opened by ``fence`` (the same mark, at least as long)."""
    mark = line.strip()
    return bool(mark) and set(mark) == {fence[0]} and len(mark) >= len(fence)


def blocks_of(page: Path) -> Iterator[Block]:
    """The fenced code blocks of a markdown page, in order."""
    lines = page.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        indent, fence = opening["indent"], opening["fence"]
        end = i + 1
        while end < len(lines) and not _closes(lines[end], fence):
            end += 1
        body = [line[len(indent):] if line.startswith(indent) else line.lstrip()
                for line in lines[i + 1:end]]
        block = Block(page, i + 1, opening["lang"].lower(), "\n".join(body) + "\n")
        if not block.lang:
            block.problems.append("a fence without a language: say what the block is "
                                  "(python, bash, console, text, yaml, ...)")
        marker = MARKER.match(lines[i - 1]) if i > 0 else None
        if marker:
            _read_marker(block, marker["options"])
        if block.lang in RUNNABLE and NEEDS_TORCH.search(block.code):
            block.torch = True
        yield block
        i = end + 1


BLOCKS = [block for page in PAGES for block in blocks_of(page)]


def test_every_block_says_what_it_is_and_markers_are_understood() -> None:
    problems = [f"{block.where}: {problem}" for block in BLOCKS for problem in block.problems]
    assert not problems, "\n".join(problems)


def test_the_pages_have_blocks_that_run() -> None:
    # Guards the parser: a change that finds no blocks would pass every test above.
    assert sum(block.runs for block in BLOCKS) >= 10
    assert {block.page.name for block in BLOCKS if block.runs} >= {"README.md", "quickstart.md"}


def slug(heading: str) -> str:
    """A heading's anchor, as GitHub and mkdocs (python-markdown's toc) make it."""
    text = re.sub(r"[^\w\s-]", "", heading.strip().lower())
    return re.sub(r"\s+", "-", text)


@pytest.mark.parametrize("readme", READMES, ids=lambda p: str(p.relative_to(REPO)))
def test_the_readme_links_to_pages_and_headings_that_exist(readme: Path) -> None:
    # mkdocs checks the links of docs/ (test below); the READMEs are not its pages.
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", readme.read_text(encoding="utf-8")):
        if re.match(r"\w+://", target):
            continue
        path, _, anchor = target.partition("#")
        page = readme.parent / path
        if not page.is_file():
            broken.append(f"{target}: no such file")
        elif anchor:
            headings = re.findall(r"^#+\s+(.*)$", page.read_text(encoding="utf-8"), re.MULTILINE)
            if anchor not in {slug(h) for h in headings}:
                broken.append(f"{target}: no heading with that anchor")
    assert not broken, "\n".join(broken)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def environment() -> dict[str, str]:
    """This process's environment less launcher variables, its own scripts first on PATH."""
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARIABLES}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


def launcher() -> list[str]:
    """The command that starts ``asyncoll-run`` with this interpreter."""
    script = Path(sys.executable).with_name("asyncoll-run")
    return [str(script)] if script.exists() else [sys.executable, "-m", "asyncoll.run"]


def command(block: Block, code: str, tmp_path: Path) -> list[str]:
    """What runs ``code``, the text of ``block``."""
    if block.lang == "python":
        script = tmp_path / "doc_block.py"
        script.write_text(code, encoding="utf-8")
        if block.ranks is None:
            return [sys.executable, str(script)]
        return [*launcher(), "--nproc-per-node", str(block.ranks), str(script)]
    if block.lang == "console":
        code = "\n".join(line[2:] for line in code.splitlines() if line.startswith("$ "))
    # Wait for what the block started in the background, failing with it.
    return ["bash", "-euo", "pipefail", "-c",
            code + '\nfor job in $(jobs -p); do wait "$job"; done\n']


def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` from the repository root in a session of its own; kill it all if stuck."""
    proc = subprocess.Popen(argv, cwd=REPO, env=environment(), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=BLOCK_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        pytest.fail(f"did not finish within {BLOCK_TIMEOUT_S} s; it printed:\n{output}")
    finally:
        try:  # anything it left running in the background
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return subprocess.CompletedProcess(argv, proc.returncode, output)


@pytest.mark.timeout(BLOCK_TIMEOUT_S + 60)
@pytest.mark.parametrize("block", [b for b in BLOCKS if b.runs],
                         ids=lambda b: f"{b.page.relative_to(REPO)}-L{b.line}")
def test_doc_block_runs(block: Block, tmp_path: Path) -> None:
    if block.torch and not HAS_TORCH:
        pytest.skip("needs torch, which is not installed (pip install '.[torch]')")
    if block.torch_at_least is not None:
        version = importlib.metadata.version("torch")
        major, minor = (int(part) for part in re.findall(r"\d+", version)[:2])
        if (major, minor) < block.torch_at_least:
            pytest.skip(f"needs torch {'.'.join(map(str, block.torch_at_least))} or later, "
                        f"and this one is {version}")
    for module in block.needs:
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"needs {module}, which is not installed")
    code = block.code
    for port in block.ports:
        code = code.replace(port, str(free_port()))
    result = run(command(block, code, tmp_path))
    assert result.returncode == 0, (
        f"{block.where} ({block.lang}) exited {result.returncode}:\n{code}\n"
        f"--- output ---\n{result.stdout}")


@pytest.mark.timeout(BUILD_TIMEOUT_S + 60)
def test_the_docs_site_builds_with_mkdocs_strict(tmp_path: Path) -> None:
    for module in ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python"):
        if importlib.util.find_spec(module.split(".")[0]) is None or (
                "." in module and importlib.util.find_spec(module) is None):
            pytest.skip(f"{module} is not installed: the docs extra brings mkdocs, "
                        "mkdocs-material and mkdocstrings (pip install '.[docs]')")
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict",
                             "--site-dir", str(tmp_path / "site")],
                            cwd=REPO, env=env, capture_output=True, text=True,
                            timeout=BUILD_TIMEOUT_S)
    assert result.returncode == 0, result.stdout + result.stderr
    commands = (tmp_path / "site" / "reference" / "commands" / "index.html").read_text()
    assert "usage: asyncoll-run" in commands and "<!-- help:" not in commands
