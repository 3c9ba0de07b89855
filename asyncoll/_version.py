"""asyncoll's version, written here only, and what `--version` says of this install."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from importlib import metadata
from typing import Any

__all__ = ["__version__", "add_version_option", "describe"]

__version__ = "0.1.0"

#: The optional parts a user may or may not have, by distribution name, with
#: what each one brings.
_OPTIONAL = (("torch", "the torch backend"),
             ("prometheus_client", "the coordinator's /metrics"))


def _installed(distribution: str) -> str | None:
    """The installed version of `distribution`, found without importing it; None: absent."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def _tls() -> str:
    try:
        import ssl
    except ImportError:  # a Python built without OpenSSL
        return "TLS: absent (this Python has no ssl module)"
    return f"TLS: {ssl.OPENSSL_VERSION}"


def describe(command: str) -> str:
    """What `command --version` prints: the version, the Python, and the optional parts."""
    lines = [f"{command} (asyncoll) {__version__}",
             f"Python {sys.version.split()[0]} ({sys.implementation.name})"]
    for distribution, brings in _OPTIONAL:
        version = _installed(distribution)
        lines.append(f"{distribution}: {version} ({brings})" if version else
                     f"{distribution}: absent ({brings} needs it)")
    lines.append(_tls())
    lines.append(f"kernels: {_kernels()}")
    return "\n".join(lines)


def _kernels() -> str:
    # Imported here: the version module is imported before numpy may be wanted.
    from asyncoll import _native
    return _native.describe()


def add_version_option(parser: argparse.ArgumentParser, command: str) -> None:
    """Give `parser` a `--version` that prints `describe` and exits."""
    parser.add_argument("--version", action=_PrintVersion, command=command,
                        help="print the version, the Python and which optional parts "
                             "are installed, and exit")


class _PrintVersion(argparse.Action):
    """argparse's own "version" action, but describing the install only when asked."""

    def __init__(self, option_strings: Sequence[str], dest: str, command: str,
                 **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)
        self._command = command

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: object, option_string: str | None = None) -> None:
        print(describe(self._command))
        parser.exit()
