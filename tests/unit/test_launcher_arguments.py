"""asyncoll-run's arguments: what it says when it is given none, and torchrun's flags."""

from __future__ import annotations

import pytest

from asyncoll import run

pytestmark = pytest.mark.timeout(30)


def test_no_arguments_get_a_usage_line_naming_the_worker_program(capsys) -> None:
    with pytest.raises(SystemExit) as exited:
        run.main([])

    said = str(exited.value.code)
    assert said.startswith("asyncoll-run: name the worker program to start")
    assert "asyncoll-run --nproc-per-node 4 train.py" in said
    assert "script_args" not in said + capsys.readouterr().err


def test_standalone_is_accepted_as_torchrun_accepts_it() -> None:
    args = run._parser().parse_args(["--standalone", "--nproc-per-node", "2", "train.py",
                                     "--epochs", "3"])

    run._check(args)
    assert (args.standalone, args.script, args.script_args) == (True, "train.py",
                                                                ["--epochs", "3"])


@pytest.mark.parametrize("other", [["--coordinator", "10.0.0.5:29500"], ["--nnodes", "2"],
                                   ["--master-port", "29500"]])
def test_standalone_refuses_what_would_contradict_it(other: list[str]) -> None:
    with pytest.raises(SystemExit, match="--standalone runs one machine's job on an "
                                         "embedded coordinator on a free port"):
        run.main(["--standalone", *other, "train.py"])


@pytest.mark.parametrize("workers, environ, processors, expected", [
    (2, {}, 2, "PASSIVE"),  # torch takes a thread a core in each: 4 on 2
    (4, {"OMP_NUM_THREADS": "1"}, 4, None),  # one each: they fit
    (4, {"OMP_NUM_THREADS": "2"}, 4, "PASSIVE"),
    (2, {"OMP_NUM_THREADS": "4,2"}, 8, None),  # nested: the outer level counts
    (2, {"OMP_NUM_THREADS": "many"}, 2, "PASSIVE"),
    (1, {}, 2, None),  # one worker: its threads share with none of ours
    (2, {"OMP_WAIT_POLICY": "ACTIVE"}, 2, None),  # the user's choice stands
])
def test_workers_whose_openmp_threads_outnumber_the_processors_wait_passively(
        workers, environ, processors, expected) -> None:
    passed = run._openmp_waits(workers, environ, processors)

    assert passed.get("OMP_WAIT_POLICY") == expected
    assert set(passed) <= {"OMP_WAIT_POLICY"}
