"""asyncoll-run passes on its workers' output a whole line at a time, in order per worker."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from .conftest import WORKERS, free_port

pytestmark = pytest.mark.timeout(120)

LINES = 200
CHATTY = str(WORKERS / "chatty.py")
LAUNCH = [sys.executable, "-m", "asyncoll.run"]
#: What a worker prints (and nothing else): whole lines of these shapes.
STDOUT_LINE = re.compile(r"(?:\[rank (\d+)\] )?(?:line (\d+) of rank (\d+)|partial of rank (\d+))")
STDERR_LINE = re.compile(r"(?:\[rank (\d+)\] )?err (\d+) of rank (\d+)")


def _unbuffered() -> dict[str, str]:
    # As Docker images and CI systems often set: each print leaves in pieces.
    return dict(os.environ, PYTHONUNBUFFERED="1")


def _check_whole_lines(text: str, pattern: re.Pattern[str], ranks: range,
                       prefix: bool = False) -> dict[int, list[int]]:
    """Each worker's line numbers in the order they came; fails on a line that is not whole."""
    seen: dict[int, list[int]] = {rank: [] for rank in ranks}
    for line in text.splitlines():
        if line.startswith("asyncoll-run:"):
            continue
        match = pattern.fullmatch(line)
        assert match, f"a line that is not one worker's whole line: {line!r}"
        labelled, number, rank = match.group(1), match.group(2), match.group(3)
        rank = rank or match.group(4)
        if prefix:
            assert labelled == rank, f"{line!r} is labelled with another rank"
        else:
            assert labelled is None, line
        seen[int(rank)].append(int(number) if number is not None else -1)
    return seen


def test_six_workers_printing_at_once_keep_every_line_whole_and_in_order():
    done = subprocess.run([*LAUNCH, "--nproc-per-node", "6", CHATTY, str(LINES)],
                          env=_unbuffered(), capture_output=True, text=True, timeout=100)
    assert done.returncode == 0, done.stderr
    out = _check_whole_lines(done.stdout, STDOUT_LINE, range(6))
    # Every line, in the order the worker printed it, and its partial last line ended.
    assert all(numbers == [*range(LINES), -1] for numbers in out.values()), out
    err = _check_whole_lines(done.stderr, STDERR_LINE, range(6))
    assert all(numbers == list(range(LINES)) for numbers in err.values())


def test_two_launchers_sharing_one_pipe_keep_their_workers_lines_whole():
    port = str(free_port())
    common = [*LAUNCH, "--nnodes", "2", "--nproc-per-node", "2"]
    read, write = os.pipe()
    try:
        nodes = [subprocess.Popen(common + ["--node-rank", "0", "--master-addr", "127.0.0.1",
                                            "--master-port", port, CHATTY, str(LINES)],
                                  env=_unbuffered(), stdout=write, stderr=subprocess.DEVNULL),
                 subprocess.Popen(common + ["--node-rank", "1", "--coordinator",
                                            f"127.0.0.1:{port}", CHATTY, str(LINES)],
                                  env=_unbuffered(), stdout=write, stderr=subprocess.DEVNULL)]
    finally:
        os.close(write)
    with os.fdopen(read, encoding="utf-8") as pipe:
        text = pipe.read()
    assert [node.wait(60) for node in nodes] == [0, 0]
    out = _check_whole_lines(text, STDOUT_LINE, range(4))
    assert all(numbers == [*range(LINES), -1] for numbers in out.values()), out


def test_prefix_starts_each_line_with_its_rank_on_stdout_and_stderr():
    done = subprocess.run([*LAUNCH, "--prefix", "--nproc-per-node", "3", CHATTY, "20"],
                          env=_unbuffered(), capture_output=True, text=True, timeout=100)
    assert done.returncode == 0, done.stderr
    out = _check_whole_lines(done.stdout, STDOUT_LINE, range(3), prefix=True)
    assert all(numbers == [*range(20), -1] for numbers in out.values())
    err = _check_whole_lines(done.stderr, STDERR_LINE, range(3), prefix=True)
    assert all(numbers == list(range(20)) for numbers in err.values())


def test_a_worker_that_dies_mid_line_gets_its_text_out_before_the_launcher_names_it():
    done = subprocess.run([*LAUNCH, "--nproc-per-node", "2", CHATTY, "3", "--die-mid-line"],
                          env=_unbuffered(), capture_output=True, text=True, timeout=100)
    assert done.returncode != 0
    assert "partial of rank 0\n" in done.stdout or "partial of rank 1\n" in done.stdout
    assert "was killed by SIGKILL" in done.stderr
    # The failed worker's own lines came out before asyncoll-run's words about it.
    failed = re.search(r"asyncoll-run: rank (\d) \(pid \d+\) was killed", done.stderr)
    assert failed, done.stderr
    last_err = done.stderr.index(f"err 2 of rank {failed.group(1)}")
    assert last_err < failed.start()
