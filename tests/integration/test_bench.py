"""asyncoll-bench: every collective timed and checked, in the nccl-tests columns."""

from __future__ import annotations

import csv
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(300)

COLLECTIVES = "all_reduce,all_gather,reduce_scatter,all_to_all,broadcast,reduce"


def bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "asyncoll.bench", "--sizes", "4,64K",
                           "--target-s", "0.02", *args], capture_output=True, text=True,
                          timeout=240)


def test_bench_prints_a_checked_row_per_collective_and_size_and_writes_csv(tmp_path):
    out = tmp_path / "rows.csv"
    result = bench("--collectives", COLLECTIVES, "--world-sizes", "2,3", "--csv", str(out))

    assert result.returncode == 0, result.stdout + result.stderr
    lines = [line.split() for line in result.stdout.splitlines() if line.startswith(" ")]
    assert len(lines) == 6 * 2 * 2
    assert {(line[0], line[1]) for line in lines} == {("asyncoll", "2"), ("asyncoll", "3")}
    assert all(line[-1] == "0" for line in lines), "a check failed"
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == len(lines)
    assert {row["collective"] for row in rows} == set(COLLECTIVES.split(","))
    assert all(float(row["time_us"]) > 0 and float(row["busbw_GBps"]) >= 0 for row in rows)


@pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                    reason="--compare gloo needs torch (CI installs it)")
def test_bench_runs_gloo_beside_asyncoll_in_one_invocation():
    result = bench("--collectives", "all_reduce,broadcast", "--compare", "gloo")

    assert result.returncode == 0, result.stdout + result.stderr
    systems = [line.split()[0] for line in result.stdout.splitlines() if line.startswith(" ")]
    assert systems.count("asyncoll") == 4 and systems.count("gloo") == 4


def test_bench_times_a_batch_beside_each_op_and_ranks_the_systems_by_mean(tmp_path):
    out = tmp_path / "rows.csv"
    result = bench("--collectives", "all_reduce,barrier", "--compare", "asyncoll-tcp",
                   "--busy", "1", "--csv", str(out))

    assert result.returncode == 0, result.stdout + result.stderr
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == 2 * 3 and all(float(row["mean_us"]) > 0 for row in rows)
    # The busy process ran beside both systems, and is stopped at the end.
    said = [line for line in result.stdout.splitlines() if line.startswith("# beside")]
    assert len(said) == 1 and "1 busy-looping process(es)" in said[0], result.stdout
    pid = int(said[0].rsplit(" ", 1)[1])
    assert not os.path.exists(f"/proc/{pid}") or "Z" in Path(f"/proc/{pid}/stat").read_text()
    # One summary line per case, fastest mean first, each other system's ratio.
    summary = [line for line in result.stdout.splitlines() if " ranks " in line
               and line.startswith("# 2 ranks")]
    assert len(summary) == 3, result.stdout
    for line in summary:
        case = line.split(": ", 1)[0].removeprefix("# 2 ranks ").split()
        means = {row["system"]: float(row["mean_us"]) for row in rows
                 if row["collective"] == case[0] and row["size"] == case[1]}
        order = [part.split()[0] for part in line.split(": ", 1)[1].split(", ")]
        assert order == sorted(means, key=means.get), (line, means)
        assert f"({means['asyncoll'] / means['asyncoll-tcp']:.2f}x)" in line, (line, means)


def test_bench_refuses_a_negative_number_of_busy_processes():
    result = bench("--busy", "-1")

    assert result.returncode != 0
    assert "--busy -1 is not a number of processes; give 0 or more" in result.stderr


def test_bench_runs_asyncoll_over_tcp_only_beside_its_default_transports():
    result = bench("--collectives", "all_reduce", "--compare", "asyncoll-tcp")

    assert result.returncode == 0, result.stdout + result.stderr
    systems = [line.split()[0] for line in result.stdout.splitlines() if line.startswith(" ")]
    assert systems.count("asyncoll") == 2 and systems.count("asyncoll-tcp") == 2


# Not imported here: importing mpi4py.MPI initializes MPI in this process, and
# an mpirun started from it then fails.
@pytest.mark.skipif(shutil.which("mpirun") is None or importlib.util.find_spec("mpi4py") is None,
                    reason="--compare mpi needs Open MPI's mpirun and mpi4py (CI installs both)")
def test_bench_runs_open_mpi_beside_asyncoll_in_one_invocation():
    result = bench("--collectives", "all_reduce,all_gather", "--compare", "mpi")

    assert result.returncode == 0, result.stdout + result.stderr
    lines = [line.split() for line in result.stdout.splitlines() if line.startswith(" ")]
    assert [line[0] for line in lines].count("mpi") == 4
    assert all(line[-1] == "0" for line in lines), "a check failed"


def test_bench_plots_bandwidth_and_time_against_size(tmp_path):
    pytest.importorskip("matplotlib", reason="--plot needs the plot extra (in [test] too)")
    chart = tmp_path / "chart.png"
    result = bench("--collectives", "all_reduce,broadcast", "--plot", str(chart))

    assert result.returncode == 0, result.stdout + result.stderr
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and chart.stat().st_size > 10_000


def test_bench_refuses_an_unknown_collective():
    result = bench("--collectives", "all_reduce,allreduce")

    assert result.returncode != 0 and "unknown collective(s) allreduce" in result.stderr


def test_bench_runs_asyncoll_compressed_and_checks_each_sum_within_its_bound():
    result = bench("--collectives", "all_reduce", "--compression", "int8")

    assert result.returncode == 0, result.stdout + result.stderr
    lines = [line.split() for line in result.stdout.splitlines()
             if line.strip() and not line.startswith("#")]
    assert [line[0] for line in lines] == ["asyncoll-int8"] * 2
    assert all(line[-1] == "0" for line in lines), "a check failed"
