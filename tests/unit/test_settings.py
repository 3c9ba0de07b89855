"""The runtime reads the environment once, into Settings; bad values are refused by name."""

from __future__ import annotations

import pytest

from asyncoll._policy import LINKS_BYTES, GroupPolicy
from asyncoll._runtime.settings import Settings
from asyncoll._defaults import HEARTBEAT_TIMEOUT_S
from asyncoll._transport.shm import segment as shm
from asyncoll._transport.settings import (
    EARLY_LIMIT_BYTES,
    SHM_MIN_BYTES,
    SHM_RING_BYTES,
    TransportSettings,
)
from asyncoll.errors import ConfigurationError


def test_an_empty_environment_gives_the_defaults():
    settings = Settings.from_environment({})

    assert settings.token is None
    assert settings.heartbeat_timeout == HEARTBEAT_TIMEOUT_S
    assert dict(settings.policy.forced_algorithms) == {}
    assert settings.transport == TransportSettings(
        shm_min_bytes=SHM_MIN_BYTES if shm.AVAILABLE else 0, shm_ring_bytes=SHM_RING_BYTES,
        early_limit_bytes=EARLY_LIMIT_BYTES)


def test_every_variable_is_read():
    settings = Settings.from_environment({
        "ASYNCOLL_TOKEN": "s3cret", "ASYNCOLL_HEARTBEAT_TIMEOUT": "2.5",
        "ASYNCOLL_ALGORITHM": "all_reduce=ring", "ASYNCOLL_SHM_BYTES": "8192",
        "ASYNCOLL_SHM_MIN_BYTES": "1", "ASYNCOLL_MAX_EARLY_BYTES": "1000",
        "MASTER_ADDR": "10.0.0.1"})

    assert settings.token == b"s3cret"
    assert settings.transport.token == b"s3cret"
    assert settings.heartbeat_timeout == 2.5
    assert dict(settings.policy.forced_algorithms) == {"all_reduce": "ring"}
    assert settings.transport.shm_ring_bytes == 8192
    assert settings.transport.shm_min_bytes == (1 if shm.AVAILABLE else 0)
    assert settings.transport.early_limit_bytes == 1000
    assert settings.environment["MASTER_ADDR"] == "10.0.0.1"


def test_the_group_policy_is_read_apart_from_the_transport():
    default = Settings.from_environment({}).policy
    given = Settings.from_environment({"ASYNCOLL_LINKS_BYTES": "0", "ASYNCOLL_HIERARCHY": "0"})

    assert (default.links_bytes, default.hierarchy) == (LINKS_BYTES, True)
    assert (given.policy.links_bytes, given.policy.hierarchy) == (0, False)
    assert not hasattr(given.transport, "links_bytes")
    assert Settings().policy == GroupPolicy()
    assert Settings.from_environment({"ASYNCOLL_SHM": "0"}).policy.arena_slot_bytes == 0


def test_shared_memory_off_sends_nothing_through_it():
    assert Settings.from_environment({"ASYNCOLL_SHM": "0"}).transport.shm_min_bytes == 0


def test_the_environment_is_copied_when_read():
    environ = {"ASYNCOLL_DATA_PORTS": "30000-30001"}
    settings = Settings.from_environment(environ)
    environ["ASYNCOLL_DATA_PORTS"] = "1-2"

    assert settings.environment["ASYNCOLL_DATA_PORTS"] == "30000-30001"


@pytest.mark.parametrize("name, value, message", [
    ("ASYNCOLL_HEARTBEAT_TIMEOUT", "soon", "ASYNCOLL_HEARTBEAT_TIMEOUT must be a positive "
                                           "number of seconds, got 'soon'"),
    ("ASYNCOLL_HEARTBEAT_TIMEOUT", "inf", "got 'inf'"),
    ("ASYNCOLL_SHM_BYTES", "lots", "ASYNCOLL_SHM_BYTES must be a positive number of bytes, "
                                   "got 'lots'"),
    ("ASYNCOLL_SHM_BYTES", "100", f"ASYNCOLL_SHM_BYTES must be at least {shm.MIN_RING_BYTES}, "
                                  "got 100"),
    ("ASYNCOLL_SHM_MIN_BYTES", "0", "ASYNCOLL_SHM_MIN_BYTES must be a positive number"),
    ("ASYNCOLL_MAX_EARLY_BYTES", "-5", "ASYNCOLL_MAX_EARLY_BYTES must be a positive number "
                                       "of bytes, got '-5'"),
    ("ASYNCOLL_ALGORITHM", "fastest", "ASYNCOLL_ALGORITHM names 'fastest'"),
])
def test_a_bad_value_is_refused_naming_the_variable_and_the_value(name, value, message):
    with pytest.raises(ConfigurationError, match=message.replace("(", r"\(")):
        Settings.from_environment({name: value})
