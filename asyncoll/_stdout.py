"""The commands' standard output, which a reader may close early (`asyncoll --version |
head -1`): the command then ends quietly, as Python's documentation of SIGPIPE advises,
instead of with a BrokenPipeError traceback."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from typing import ParamSpec

P = ParamSpec("P")

#: The exit status of a command whose reader closed its output.
CLOSED_PIPE_STATUS = 1


def ends_quietly_on_a_closed_pipe(main: Callable[P, int]) -> Callable[P, int]:
    """`main`, a command's entry point, made to end with `CLOSED_PIPE_STATUS` and
    no traceback when its standard output's reader has gone."""

    @functools.wraps(main)
    def entry(*args: P.args, **kwargs: P.kwargs) -> int:
        try:
            try:
                return main(*args, **kwargs)
            finally:
                # What is still buffered is written now, where the error can be caught,
                # not at the interpreter's exit.
                sys.stdout.flush()
        except BrokenPipeError:
            # Python flushes stdout again at exit: point it where nothing can break.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            return CLOSED_PIPE_STATUS

    return entry
