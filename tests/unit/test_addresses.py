"""Choosing the data port's bind and advertised addresses from the environment."""

from __future__ import annotations

import pytest

from asyncoll._runtime.addresses import interface_address, listen_plan
from asyncoll.errors import ConfigurationError

pytestmark = pytest.mark.timeout(30)


def test_default_advertises_the_address_that_reaches_the_coordinator():
    plan = listen_plan("10.0.0.7", environ={})
    assert (plan.advertise, plan.bind, plan.ports) == ("10.0.0.7", "10.0.0.7", None)


def test_advertise_override_and_port_range():
    plan = listen_plan("127.0.0.1", environ={"ASYNCOLL_ADVERTISE_ADDR": "203.0.113.5",
                                             "ASYNCOLL_DATA_PORTS": "30000-30002"})
    assert plan.advertise == "203.0.113.5" and plan.ports == range(30000, 30003)
    assert plan.source == "ASYNCOLL_ADVERTISE_ADDR"


def test_interface_name_gives_its_ipv4_address():
    assert interface_address("lo") == "127.0.0.1"
    plan = listen_plan("10.0.0.7", environ={"ASYNCOLL_SOCKET_IFNAME": "lo"})
    assert (plan.advertise, plan.bind) == ("127.0.0.1", "127.0.0.1")


def test_unknown_interface_is_refused_naming_the_ones_there_are():
    with pytest.raises(ConfigurationError, match="'nosuch0' names no network interface.*lo"):
        listen_plan("10.0.0.7", environ={"ASYNCOLL_SOCKET_IFNAME": "nosuch0"})


@pytest.mark.parametrize("text", ["abc", "30100-30000", "0-10", "70000", "1-2-3"])
def test_malformed_port_range_is_refused(text):
    with pytest.raises(ConfigurationError, match=f"ASYNCOLL_DATA_PORTS={text!r}"):
        listen_plan("127.0.0.1", environ={"ASYNCOLL_DATA_PORTS": text})
