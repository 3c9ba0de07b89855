"""Reading init_process_group's arguments and environment, as torch would."""

from __future__ import annotations

import subprocess
import sys

import pytest

from asyncoll._runtime.init_method import resolve, resolve_published, standing_coordinators
from asyncoll.errors import ConfigurationError

pytestmark = pytest.mark.timeout(60)

ENV = {"MASTER_ADDR": "10.1.2.3", "MASTER_PORT": "29501", "WORLD_SIZE": "4"}


def test_env_reads_address_world_size_and_optional_rank():
    where = resolve(None, "env://", -1, -1, 5.0, None, environ={**ENV, "RANK": "0"})
    assert (where.host, where.port, where.world_size, where.rank) == ("10.1.2.3", 29501, 4, 0)
    assert where.may_host and where.job == "default" and where.timeout == 5.0


def test_env_without_rank_lets_the_coordinator_choose_and_never_hosts():
    where = resolve("gloo", None, -1, -1, 5.0, None, environ=ENV)
    assert where.rank == -1 and not where.may_host


def test_arguments_override_the_environment_and_job_id_comes_from_it():
    where = resolve("asyncoll", "tcp://coord:7000", 2, 1, 5.0, None,
                    environ={**ENV, "ASYNCOLL_JOB_ID": "train-7"})
    assert (where.host, where.port, where.world_size, where.rank) == ("coord", 7000, 2, 1)
    assert where.job == "train-7"


@pytest.mark.parametrize("backend, init_method, world_size, rank, environ, message", [
    ("nccl", None, -1, -1, ENV, "backend 'nccl' is not available"),
    (None, "file:///tmp/x", 2, 0, {}, "init_method 'file:///tmp/x' is not supported"),
    (None, "tcp://host", 2, 0, {}, "must look like tcp://host:port"),
    (None, "env://", -1, -1, {"MASTER_PORT": "1", "WORLD_SIZE": "2"}, "MASTER_ADDR is not set"),
    (None, "env://", -1, -1, {"MASTER_ADDR": "h", "WORLD_SIZE": "2"}, "MASTER_PORT is not set"),
    (None, "env://", -1, -1, {**ENV, "WORLD_SIZE": "four"}, "WORLD_SIZE must be an integer, "
                                                            "got 'four'"),
    (None, "tcp://h:1", -1, -1, {}, "WORLD_SIZE is not set (or pass world_size=)"),
    (None, "env://", 0, -1, ENV, "world_size must be at least 1, got 0"),
    (None, "env://", -1, -2, ENV, "rank -2 is out of range for world size 4"),
    (None, "env://", -1, -1, {**ENV, "MASTER_PORT": "70000"}, "port 70000 is not a TCP port"),
])
def test_bad_arguments_are_refused_with_a_sentence_naming_the_value(
        backend, init_method, world_size, rank, environ, message):
    with pytest.raises(ConfigurationError) as info:
        resolve(backend, init_method, world_size, rank, 5.0, None, environ=environ)
    assert message in str(info.value)


def test_importing_asyncoll_does_not_import_torch():
    code = "import sys, asyncoll, asyncoll.aio; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], timeout=50).returncode == 0


@pytest.mark.parametrize("launcher_env, rank, size", [
    ({"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "8"}, 3, 8),
    ({"SLURM_PROCID": "5", "SLURM_NTASKS": "6"}, 5, 6),
    ({"RANK": "1", "WORLD_SIZE": "2", "SLURM_PROCID": "5", "SLURM_NTASKS": "6"}, 1, 2),
    ({"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "4", "SLURM_PROCID": "2",
      "SLURM_NTASKS": "4"}, 0, 4),
])
def test_mpirun_and_srun_variables_give_rank_and_world_size(launcher_env, rank, size):
    environ = {"MASTER_ADDR": "h", "MASTER_PORT": "29500", **launcher_env}
    where = resolve(None, "env://", -1, -1, 5.0, None, environ=environ)
    assert (where.rank, where.world_size) == (rank, size)


def test_bad_slurm_value_is_named():
    with pytest.raises(ConfigurationError, match="SLURM_NTASKS must be an integer, got 'x'"):
        resolve(None, "env://", -1, -1, 5.0, None,
                environ={"MASTER_ADDR": "h", "MASTER_PORT": "1", "SLURM_NTASKS": "x"})


def test_asyncoll_run_coordinator_variable_wins_over_master_port_and_is_never_hosted():
    # asyncoll-run leaves MASTER_PORT to a torch program's store.
    environ = {**ENV, "RANK": "0", "ASYNCOLL_COORDINATOR": "127.0.0.1:4100"}
    where = resolve(None, "env://", -1, -1, 5.0, None, environ=environ)
    assert (where.host, where.port, where.rank, where.may_host) == ("127.0.0.1", 4100, 0, False)
    ipv6 = resolve(None, None, -1, -1, 5.0, None,
                   environ={**environ, "ASYNCOLL_COORDINATOR": "[::1]:4100"})
    assert (ipv6.host, ipv6.port) == ("::1", 4100)


def test_bad_asyncoll_coordinator_variable_is_named():
    with pytest.raises(ConfigurationError,
                       match="ASYNCOLL_COORDINATOR='host-without-port' must be HOST:PORT"):
        resolve(None, "env://", -1, -1, 5.0, None,
                environ={**ENV, "ASYNCOLL_COORDINATOR": "host-without-port"})


def test_standing_coordinators_are_read_in_order_and_none_when_unset():
    environ = {"ASYNCOLL_COORDINATOR": "10.0.0.1:4100,[::1]:4101"}
    assert standing_coordinators(environ) == (("10.0.0.1", 4100), ("::1", 4101))
    assert standing_coordinators({}) == standing_coordinators({"ASYNCOLL_COORDINATOR": ""}) == ()


def test_a_published_coordinator_is_joined_elastic_with_its_fallbacks_and_never_hosted():
    where = resolve_published("10.0.0.1", 4100, "torch-1", 2, 0, 5.0, (("10.0.0.2", 4101),))
    assert (where.host, where.port, where.job, where.world_size, where.rank) == (
        "10.0.0.1", 4100, "torch-1", 2, 0)
    assert where.fallbacks == (("10.0.0.2", 4101),)
    # Elastic, so that torch's shrink_group and reconfigure can go on after a loss.
    assert not where.may_host and where.bounds == (True, 0, 0)
    with pytest.raises(ConfigurationError, match="rank 2 is out of range for world size 2"):
        resolve_published("10.0.0.1", 4100, "torch-1", 2, 2, 5.0, ())


TORCHRUN = {**ENV, "RANK": "0", "TORCHELASTIC_RUN_ID": "none",
            "TORCHELASTIC_USE_AGENT_STORE": "True", "TORCHELASTIC_RESTART_COUNT": "0"}


def test_env_under_torchrun_meets_through_its_agents_store_and_hosts_nothing_there():
    where = resolve("gloo", "env://", -1, -1, 5.0, None, environ=TORCHRUN)
    assert where.torch_store and not where.may_host
    assert (where.host, where.port, where.rank, where.world_size) == ("10.1.2.3", 29501, 0, 4)


@pytest.mark.parametrize("environ, init_method", [
    ({**TORCHRUN, "TORCHELASTIC_USE_AGENT_STORE": "False"}, "env://"),  # rank 0 hosts the store
    ({k: v for k, v in TORCHRUN.items() if k != "TORCHELASTIC_RUN_ID"}, "env://"),
    ({**TORCHRUN, "ASYNCOLL_COORDINATOR": "10.9.9.9:7000"}, "env://"),  # asyncoll-run's
    (TORCHRUN, "tcp://10.9.9.9:7000"),  # an address given outright
])
def test_torchruns_store_is_used_only_where_torchrun_says_its_agent_serves_it(
        environ, init_method):
    where = resolve(None, init_method, -1, -1, 5.0, None, environ=environ)
    assert not where.torch_store
