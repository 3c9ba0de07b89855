"""The optional C extension (asyncoll._native._arena, from asyncoll/_native/*.c); everything
else is in pyproject.toml.

It is built where a C compiler and Python's headers are found, on Linux
x86-64 (the only platform the shared-memory arena runs on). Where the build
fails, the install goes on without it and asyncoll runs its pure-Python path
(asyncoll._native says so once: see its warn_once). ASYNCOLL_PURE_PYTHON_BUILD=1
skips the build, as an install without a compiler would.
"""

from __future__ import annotations

import os
import platform
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

# -ffp-contract=off: no fused multiply-add, so every reduction rounds as numpy's does.
# -fvisibility=hidden: the files' shared functions stay inside the module.
# No -flto: it made the 1 MiB all_reduce slower than the one-file build did
# (issue 60's closing note has the figures).
FLAGS = ["-O3", "-std=c11", "-Wall", "-Wextra", "-Werror", "-ffp-contract=off",
         "-fno-strict-aliasing", "-fvisibility=hidden"]


class OptionalBuildExt(build_ext):
    """build_ext that leaves an extension out, with a message, where it fails to build."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # no compiler at all (setuptools' CCompilerError, ...)
            self._skipped(exc)

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:
            self._skipped(exc)

    def _skipped(self, exc: BaseException) -> None:
        print(f"asyncoll: the C extension was not built ({exc}); the pure-Python path "
              "will run", file=sys.stderr)


def _extensions() -> list[Extension]:
    if os.environ.get("ASYNCOLL_PURE_PYTHON_BUILD", "") not in ("", "0"):
        return []
    if not (sys.platform.startswith("linux")
            and platform.machine().lower() in ("x86_64", "amd64")):
        return []
    # The module's files, from its init down (docs/design/native.md draws them).
    names = ("module", "front", "express_type", "express", "lock", "steps", "copies", "core",
             "reduce", "field", "place")
    headers = ("contract", "copies", "core", "express", "express_type", "field", "front",
               "lock", "place", "reduce", "steps")
    return [Extension("asyncoll._native._arena", [f"asyncoll/_native/{name}.c" for name in names],
                      depends=[f"asyncoll/_native/{name}.h" for name in headers],
                      extra_compile_args=FLAGS, optional=True)]


setup(ext_modules=_extensions(), cmdclass={"build_ext": OptionalBuildExt})
