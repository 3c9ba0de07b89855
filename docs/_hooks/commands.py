"""mkdocs hook: the commands' reference page is their own ``--help``, made at build time.

docs/reference/commands.md holds a marker ``<!-- help: COMMAND -->`` for each
command asyncoll installs; this hook replaces it with what ``COMMAND --help``
prints (and, for a command with sub-commands, each sub-command's), read from
the argparse parsers themselves by calling each command's entry point. So the
page cannot drift from the options: there is no second copy to keep. A command
in pyproject's [project.scripts] without a marker, or a marker naming no
command, fails the build.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import io
import os
import re
from typing import Any

#: The page that holds the markers, relative to docs_dir.
PAGE = "reference/commands.md"
MARKER = re.compile(r"<!-- help: (?P<command>[\w-]+) -->")
#: argparse wraps help at the terminal's width (COLUMNS); fix it so builds agree.
WIDTH = "88"


def _commands() -> dict[str, Any]:
    """Each console script asyncoll installs, by name, as its entry point."""
    scripts = importlib.metadata.distribution("asyncoll").entry_points
    return {ep.name: ep for ep in scripts if ep.group == "console_scripts"}


def _help(entry_point: Any, argv: list[str]) -> str:
    """What the entry point prints for ``argv`` (ending in --help), from its own parser."""
    main = entry_point.load()
    out = io.StringIO()
    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = WIDTH
    try:
        with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
            main(argv)
    finally:
        if saved is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = saved
    text = out.getvalue().rstrip()
    if not text.startswith("usage:"):
        raise RuntimeError(f"{entry_point.name} {' '.join(argv)} printed no usage: {text!r}")
    return text


def _sub_commands(help_text: str) -> list[str]:
    """The sub-commands a help text offers: argparse lists them as the positional ``{a,b}``."""
    found = re.search(r"^positional arguments:\n  \{([\w,-]+)\}", help_text, re.MULTILINE)
    return found.group(1).split(",") if found else []


def _block(command: str, entry_point: Any) -> str:
    parts = []
    top = _help(entry_point, ["--help"])
    parts.append(f"$ {command} --help\n{top}")
    for sub in _sub_commands(top):
        parts.append(f"$ {command} {sub} --help\n{_help(entry_point, [sub, '--help'])}")
    return "```text\n" + "\n\n".join(parts) + "\n```"


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    if page.file.src_uri != PAGE:
        return markdown
    commands = _commands()
    named = MARKER.findall(markdown)
    missing = sorted(set(commands) - set(named))
    unknown = sorted(set(named) - set(commands))
    if missing or unknown:
        raise RuntimeError(f"{PAGE}: commands without a help marker: {missing}; markers "
                           f"naming no installed command: {unknown}")
    return MARKER.sub(lambda m: _block(m["command"], commands[m["command"]]), markdown)
