"""The four seed programs on asyncoll print what they print with backend='gloo'.

The seed programs are the four torch.distributed programs asyncoll was first
built to run (examples/ has them on numpy arrays too). Each is here verbatim
(with the imports their page's later examples leave out), in a temporary
file; its asyncoll form differs only in ``backend='asyncoll'``. It runs
under torchrun and under asyncoll-run, and
each rank's lines are compared with that rank's lines under gloo (run with
torchrun): the ranks share stdout, so lines of different ranks can arrive in
any order, and are picked out by their "Process R" prefix.

Its ``import asyncoll as dist`` form (backend 'gloo' kept, as in a program
moved over unchanged) runs under torchrun too: asyncoll's own
init_process_group then meets through the store torchrun's agent hosts at
MASTER_PORT.
"""

from __future__ import annotations

import functools
import re
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from . import conftest

pytest.importorskip("torch")

#: Limit on one launch (all its processes).
JOB_TIMEOUT_S = 90

HEADER = "import torch\nimport torch.distributed as dist\n"
SUM = HEADER + """\
dist.init_process_group(backend='gloo', init_method='env://')
rank = dist.get_rank()
t = torch.tensor([rank + 1, rank + 2], dtype=torch.float32)
print(f"Process {rank} before all_reduce: {t}")
dist.all_reduce(t, op=dist.ReduceOp.SUM)
print(f"Process {rank} after all_reduce: {t}")
dist.destroy_process_group()
"""
PROGRAMS = {
    "sum": (SUM, 2),
    "product": (SUM.replace("ReduceOp.SUM", "ReduceOp.PRODUCT"), 2),
    "custom_group_max": (HEADER + """\
dist.init_process_group(backend='gloo', init_method='env://')
rank = dist.get_rank()
group = dist.new_group([0, 2])
if rank in [0, 2]:
    t = torch.tensor([rank + 1, rank + 2], dtype=torch.float32)
    print(f"Process {rank} before all_reduce: {t}")
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    print(f"Process {rank} after all_reduce: {t}")
dist.destroy_process_group()
""", 3),
    "average_accuracy": (HEADER + """\
dist.init_process_group(backend='gloo', init_method='env://')
rank = dist.get_rank()
world_size = dist.get_world_size()
torch.manual_seed(rank)
accuracy = torch.tensor([float(torch.randint(70, 100, (1,)).item()) / 100.0])
print(f"Process {rank} local accuracy: {accuracy.item():.2f}")
dist.all_reduce(accuracy, op=dist.ReduceOp.SUM)
avg_accuracy = accuracy / world_size
print(f"Process {rank} global average accuracy: {avg_accuracy.item():.2f}")
dist.destroy_process_group()
""", 4),
}
# One record per print(): "Process R text", ended by a newline or, where two
# ranks' writes interleave, by the next record.
RECORD = re.compile(r"Process (\d+) (.*?)(?=Process \d+ |\n|\Z)")
#: What an unclean exit leaves on stderr.
ABORT_SIGNS = ("Traceback", "terminate called", "Aborted", "Fatal Python error",
               "core dumped")


def torchrun_static(nproc: int, script: list[str]) -> list[str]:
    """torchrun as typed out of habit: its static rendezvous, its store on a given port."""
    return [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc),
            "--master-port", str(conftest.free_port()), *script]


LAUNCHERS: dict[str, Callable[[int, list[str]], list[str]]] = {
    "torchrun": conftest.torchrun, "torchrun-static": torchrun_static,
    "asyncoll-run": conftest.asyncoll_run}


def lines_by_rank(stdout: str, world_size: int) -> dict[int, list[str]]:
    """Each rank's "Process R ..." lines, in the order that rank printed them."""
    by_rank: dict[int, list[str]] = {rank: [] for rank in range(world_size)}
    for match in RECORD.finditer(stdout):
        by_rank[int(match.group(1))].append(f"Process {match.group(1)} "
                                            f"{match.group(2).rstrip()}")
    return by_rank


def launch(name: str, backend: str, launcher: str, as_dist: str, tmp: Path,
           entry_point_dir: Path) -> dict[int, list[str]]:
    """Run program ``name`` with ``backend``, its ``dist`` being module ``as_dist``."""
    source, world_size = PROGRAMS[name]
    script = tmp / f"{name}_{backend}_{as_dist.replace('.', '_')}.py"
    script.write_text(source.replace("backend='gloo'", f"backend='{backend}'").replace(
        "import torch.distributed as dist", f"import {as_dist} as dist"))
    command = LAUNCHERS[launcher](world_size, [str(script)])
    result = conftest.run(command, conftest.environment(entry_point_dir), JOB_TIMEOUT_S,
                          cwd=tmp)
    report = (f"{launcher} {name} backend={backend} dist={as_dist} exited "
              f"{result.returncode}:\n{result.stdout}\n{result.stderr[-5000:]}")
    assert result.returncode == 0, report
    assert not [s for s in ABORT_SIGNS if s in result.stderr], report
    return lines_by_rank(result.stdout, world_size)


@functools.lru_cache(maxsize=None)
def gloo_lines(name: str, tmp: Path, entry_point_dir: Path) -> dict[int, list[str]]:
    return launch(name, "gloo", "torchrun", "torch.distributed", tmp, entry_point_dir)


#: How each program is run: (backend, launcher, what it imports as dist). The last two
#: keep backend='gloo', as a torch program moved over unchanged does.
FORMS = {"backend_asyncoll-torchrun": ("asyncoll", "torchrun", "torch.distributed"),
         "backend_asyncoll-asyncoll_run": ("asyncoll", "asyncoll-run", "torch.distributed"),
         "import_asyncoll-torchrun": ("gloo", "torchrun", "asyncoll"),
         "import_asyncoll-torchrun_static": ("gloo", "torchrun-static", "asyncoll")}


@pytest.mark.timeout(3 * JOB_TIMEOUT_S)
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_seed_program_prints_per_rank_what_gloo_prints(
        name: str, form: str, entry_point_dir: Path,
        tmp_path_factory: pytest.TempPathFactory) -> None:
    tmp = tmp_path_factory.getbasetemp() / "seed_programs"
    tmp.mkdir(exist_ok=True)
    expected = gloo_lines(name, tmp, entry_point_dir)

    got = launch(name, *FORMS[form], tmp, entry_point_dir)

    assert got == expected
    assert sum(map(len, expected.values())) >= 4  # the gloo run printed something
