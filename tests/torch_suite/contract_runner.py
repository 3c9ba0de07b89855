"""Running the fault-tolerance contract's scenarios on a backend, and the table of outcomes.

The table (scenario x backend) on the installed torch, from the worktree's root:

    PYTHONPATH=$PWD /work/venv-t14/bin/python tests/torch_suite/contract_runner.py

(``--backend NAME``, repeatable, picks the backends: gloo and asyncoll by
default; ``-k TEXT`` the scenarios whose name holds TEXT; ``--json PATH``
also writes the outcomes, as ``test_fault_tolerance_contract.py`` reads them.)

Each scenario of ``fault_tolerance_contract.py`` runs in its own ranks,
forked from this process (which imports torch once, and never starts a
group itself), over a fresh FileStore. A rank reports its outcome through a
pipe, then destroys its group and exits. Every wait has a deadline: all ranks
must report within :data:`SCENARIO_S`; once one has failed, the others get
:data:`AFTER_FAILURE_S` more (they are usually waiting on it, in the store);
when all have passed, each must exit within :data:`EXIT_S` of reporting, as
upstream's harness waits for its processes. A rank past its deadline is
killed and counts as failed; a failed scenario's ranks are all killed.

gloo, the reference, gets a second try at a scenario it fails (its own
reconfigure can race: a rank that reforms again at once may close the full
mesh its peer is still connecting), and the outcome keeps the first try's
reason. asyncoll gets one try: its outcome is what is tested.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).parent))

from fault_tolerance_contract import BY_NAME, SCENARIOS, Rank, Scenario  # noqa: E402

#: The longest a scenario's ranks may take to report (a healthy one takes seconds; a
#: failing one may wait out a 30 s group or reconfigure timeout first).
SCENARIO_S = 120.0
#: How long the other ranks may still report once one has failed.
AFTER_FAILURE_S = 5.0
#: How long a rank may take to destroy its group and exit after reporting.
EXIT_S = 30.0
BACKENDS = ("gloo", "asyncoll")
#: The backends whose failed scenario is run a second time (the references).
RETRIED = frozenset({"gloo"})


@dataclass
class Outcome:
    """How one scenario went on one backend.

    Attributes:
        status: "passed", "failed" or "skipped".
        detail: why it failed (each failing rank's traceback, the first to fail first),
            or why it was skipped.
        seconds: how long its ranks ran.
        reason: the first failure's last line.
        first_try: where a second try was run, the first try's reason; else "".
    """

    status: str
    detail: str = ""
    seconds: float = 0.0
    reason: str = ""
    first_try: str = ""

    def brief(self) -> str:
        """The outcome in a table cell: the status, and the failure's last line."""
        if self.status == "passed" and self.first_try:
            return f"passed on a second try ({self.seconds:.1f} s; first: {self.first_try[:100]})"
        if self.status == "passed":
            return f"passed ({self.seconds:.1f} s)"
        if self.status == "skipped":
            return "skipped"
        return f"FAILED ({self.seconds:.1f} s): {self.reason[:140]}"


def _rank_main(name: str, backend: str, rank: int, size: int, store_path: str,
               report: Connection) -> None:
    status, detail = "passed", ""
    try:
        BY_NAME[name].run(Rank(backend, rank, size, store_path))
    except BaseException:  # noqa: BLE001 - whatever it was, it is the scenario's outcome
        status, detail = "failed", traceback.format_exc()
    try:
        report.send((status, detail))
        if dist.is_initialized():
            dist.destroy_process_group()
    except BaseException:  # noqa: BLE001, S110 - upstream's harness ignores teardown errors
        pass
    finally:
        os._exit(0)


def run_scenario(scenario: Scenario, backend: str, workdir: Path) -> Outcome:
    """Run ``scenario`` on ``backend`` in ``scenario.ranks`` forked processes."""
    if scenario.skip:
        return Outcome("skipped", scenario.skip)
    fork = multiprocessing.get_context("fork")
    store_path = tempfile.mkdtemp(dir=workdir) + "/store"
    started = time.monotonic()
    procs, waiting = [], {}
    for rank in range(scenario.ranks):
        incoming, outgoing = fork.Pipe(duplex=False)
        proc = fork.Process(target=_rank_main, daemon=True,
                            args=(scenario.name, backend, rank, scenario.ranks, store_path,
                                  outgoing))
        proc.start()
        outgoing.close()
        procs.append(proc)
        waiting[incoming] = rank
    reports: dict[int, tuple[str, str, float]] = {}
    deadline = started + SCENARIO_S
    while waiting and time.monotonic() < deadline:
        for conn in wait(list(waiting), timeout=deadline - time.monotonic()):
            rank = waiting.pop(conn)  # type: ignore[call-overload]
            try:
                status, detail = conn.recv()  # type: ignore[union-attr]
            except EOFError:
                procs[rank].join(5)
                status, detail = "failed", (f"rank {rank} ended without reporting (exit "
                                            f"code {procs[rank].exitcode})")
            reports[rank] = (status, detail, time.monotonic())
            if status == "failed":
                deadline = min(deadline, time.monotonic() + AFTER_FAILURE_S)
    elapsed = time.monotonic() - started
    for rank in waiting.values():
        reports[rank] = ("failed", f"rank {rank} did not report within {elapsed:.0f} s (killed)",
                         float("inf"))
    # A failed scenario's ranks are killed at once: those that wait on a failed
    # peer would wait out its timeouts in destroy_process_group.
    some_failed = any(status == "failed" for status, _, _ in reports.values())
    exit_by = time.monotonic() + (0.0 if some_failed else EXIT_S)
    for rank, proc in enumerate(procs):
        proc.join(max(0.0, exit_by - time.monotonic()))
        if proc.is_alive():
            proc.kill()
            proc.join()
            if reports[rank][0] == "passed":
                reports[rank] = ("failed", f"rank {rank} passed but did not exit within "
                                 f"{EXIT_S:.0f} s (destroy_process_group)", float("inf"))
    failed = sorted((at, rank, detail) for rank, (status, detail, at) in reports.items()
                    if status == "failed")
    if not failed:
        return Outcome("passed", seconds=elapsed)
    first = [line.strip() for line in failed[0][2].splitlines() if line.strip()]
    return Outcome("failed", "\n".join(f"[rank {rank}] {detail.strip()}"
                                       for _, rank, detail in failed), elapsed,
                   f"rank {failed[0][1]}: {first[-1] if first else '?'}")


def run_backend(backend: str, names: list[str], workdir: Path) -> dict[str, Outcome]:
    """Every scenario in ``names`` on ``backend``, one after another."""
    if backend == "asyncoll":
        import asyncoll  # noqa: F401 - registers the "asyncoll" backend with torch
    return {name: run_twice_if_reference(BY_NAME[name], backend, workdir) for name in names}


def run_twice_if_reference(scenario: Scenario, backend: str, workdir: Path) -> Outcome:
    """:func:`run_scenario`, and for a backend in :data:`RETRIED` a second try after a
    failure of a current scenario (a superseded one fails there by design), the first
    try's reason kept in the outcome."""
    outcome = run_scenario(scenario, backend, workdir)
    if outcome.status != "failed" or backend not in RETRIED or scenario.superseded:
        return outcome
    again = run_scenario(scenario, backend, workdir)
    again.first_try = outcome.reason
    return again


def table(results: dict[str, dict[str, Outcome]]) -> str:
    """A Markdown table: a row per scenario, a column per backend; then each failure's
    tracebacks (their first 40 lines)."""
    backends = list(results)
    names = list(next(iter(results.values())))
    lines = [f"torch {torch.__version__}", "",
             "| scenario | " + " | ".join(backends) + " |",
             "|---|" + "---|" * len(backends)]
    lines += [f"| {name} | " + " | ".join(results[b][name].brief() for b in backends) + " |"
              for name in names]
    for backend in backends:
        for name, outcome in results[backend].items():
            if outcome.status == "failed":
                lines += ["", f"## {name} on {backend}", "", *outcome.detail.splitlines()[:40]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    """Run the scenarios, print the table, and write the outcomes as JSON if asked."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", action="append",
                        help="a backend to run the scenarios on (repeatable; default: "
                             f"{', '.join(BACKENDS)})")
    parser.add_argument("-k", dest="keyword", default="",
                        help="only the scenarios whose name holds this text")
    parser.add_argument("--json", type=Path, help="also write the outcomes to this file")
    args = parser.parse_args(argv)
    names = [s.name for s in SCENARIOS if args.keyword in s.name]
    results: dict[str, dict[str, Outcome]] = {}
    with tempfile.TemporaryDirectory() as workdir:
        for backend in args.backend or BACKENDS:
            results[backend] = run_backend(backend, names, Path(workdir))
    if args.json:
        document: dict[str, Any] = {
            "torch": str(torch.__version__),
            "outcomes": {b: {n: asdict(o) for n, o in r.items()} for b, r in results.items()}}
        args.json.write_text(json.dumps(document, indent=1))
    print(table(results), flush=True)


if __name__ == "__main__":
    main()
