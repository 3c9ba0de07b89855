"""Writing and reading host:port for IPv4, IPv6 and host names, and every front door's use."""

from __future__ import annotations

import pytest

from asyncoll import cli, run
from asyncoll._runtime import addresses
from asyncoll._runtime.addresses import listen_plan
from asyncoll._runtime.init_method import resolve
from asyncoll._wire.endpoint import host_literal, join_host_port, split_host_port, wildcard
from asyncoll._wire.status import JobStatus, MemberStatus
from asyncoll.errors import ConfigurationError

pytestmark = pytest.mark.timeout(30)


@pytest.mark.parametrize("text, expected", [
    ("127.0.0.1:29500", ("127.0.0.1", 29500)),
    ("node-3.cluster:1", ("node-3.cluster", 1)),
    ("localhost:65535", ("localhost", 65535)),
    ("[::1]:29500", ("::1", 29500)),
    ("[fd00::2]:7", ("fd00::2", 7)),
    ("[fe80::1%eth0]:29500", ("fe80::1%eth0", 29500)),
    (" 10.0.0.5:29500 ", ("10.0.0.5", 29500)),
])
def test_split_host_port_reads_ipv4_names_and_bracketed_ipv6(text, expected):
    assert split_host_port(text, "--coordinator") == expected


@pytest.mark.parametrize("text, message", [
    ("::1:29500", "is ambiguous: put an IPv6 address in brackets and the port after them, "
                  "as in [::1]:29500"),
    ("fd00::2", "is ambiguous"),
    ("host-without-port", "must be HOST:PORT"),
    (":29500", "must be HOST:PORT"),
    ("", "must be HOST:PORT"),
    ("host:", "must end in a port from 1 to 65535"),
    ("host:0", "must end in a port from 1 to 65535"),
    ("host:70000", "must end in a port from 1 to 65535"),
    ("host:http", "must end in a port from 1 to 65535"),
    ("host:２９", "must end in a port from 1 to 65535"),
    ("[::1]", "must be [IPV6]:PORT"),
    ("[::1:29500", "must be [IPV6]:PORT"),
    ("[::1]29500", "must be [IPV6]:PORT"),
    ("[]:29500", "is not a host"),
    ("[node-3]:29500", "is neither a host name nor an IP address"),
    ("[1.2.3.4]:29500", "is neither a host name nor an IP address"),
    ("[::g]:29500", "is neither a host name nor an IP address"),
    ("a b:29500", "is not a host"),
])
def test_split_host_port_refuses_bad_forms_naming_the_value(text, message):
    with pytest.raises(ConfigurationError, match="--coordinator=") as info:
        split_host_port(text, "--coordinator")
    assert message in str(info.value)


@pytest.mark.parametrize("text, expected", [
    ("127.0.0.1", "127.0.0.1"), ("node-3", "node-3"), ("::1", "::1"), ("[::1]", "::1"),
    (" fd00::2 ", "fd00::2"), ("::", "::"), ("0.0.0.0", "0.0.0.0"),
    ("fe80::1%eth0", "fe80::1%eth0"),
])
def test_host_literal_takes_a_bare_or_bracketed_host(text, expected):
    assert host_literal(text, "MASTER_ADDR") == expected


@pytest.mark.parametrize("text, message", [
    ("", "is not a host"), ("  ", "is not a host"), ("[::1", "is not a host"),
    ("::1]", "is not a host"), ("a/b", "is not a host"),
    ("10.0.0.1:29500", "neither a host name nor an IP address; give the host alone"),
    ("[node]", "neither a host name nor an IP address"), ("::1::2", "neither"),
])
def test_host_literal_refuses_what_is_no_host(text, message):
    with pytest.raises(ConfigurationError, match=r"MASTER_ADDR=") as info:
        host_literal(text, "MASTER_ADDR")
    assert message in str(info.value)


@pytest.mark.parametrize("host, port, expected", [
    ("127.0.0.1", 29500, "127.0.0.1:29500"), ("node-3", 1, "node-3:1"),
    ("::1", 29500, "[::1]:29500"), ("fe80::1%eth0", 5, "[fe80::1%eth0]:5"),
])
def test_join_host_port_brackets_ipv6_only_and_round_trips(host, port, expected):
    assert join_host_port(host, port) == expected
    assert split_host_port(expected, "x") == (host, port)


def test_wildcard_binds_every_interface_of_the_hosts_family():
    assert wildcard("127.0.0.1") == "0.0.0.0"
    assert wildcard("node-3") == "0.0.0.0"
    assert wildcard("::1") == "::"


# -- the front doors ------------------------------------------------------------------


@pytest.mark.parametrize("init_method, environ, host, port", [
    ("tcp://[::1]:29500", {}, "::1", 29500),
    ("tcp://[fd00::2]:7/", {}, "fd00::2", 7),
    ("tcp://10.0.0.5:29500", {}, "10.0.0.5", 29500),
    ("tcp://user@node-3:29500", {}, "node-3", 29500),
    ("env://", {"MASTER_ADDR": "::1", "MASTER_PORT": "29500"}, "::1", 29500),
    ("env://", {"MASTER_ADDR": "[::1]", "MASTER_PORT": "29500"}, "::1", 29500),
    ("env://", {"MASTER_ADDR": "10.0.0.5", "MASTER_PORT": "29500"}, "10.0.0.5", 29500),
    (None, {"ASYNCOLL_COORDINATOR": "[::1]:4100", "MASTER_ADDR": "h", "MASTER_PORT": "1"},
     "::1", 4100),
])
def test_init_process_group_reads_ipv6_addresses(init_method, environ, host, port):
    where = resolve(None, init_method, 2, 0, 5.0, None, environ=environ)
    assert (where.host, where.port) == (host, port)


@pytest.mark.parametrize("init_method, environ, message", [
    ("tcp://::1:29500", {}, "init_method 'tcp://::1:29500' must look like tcp://host:port "
                            "(tcp://[::1]:29500 for an IPv6 address)"),
    ("tcp://[::1]", {}, "must look like tcp://host:port"),
    ("tcp://h:70000", {}, "must look like tcp://host:port"),
    ("env://", {"MASTER_ADDR": "10.0.0.5:29500", "MASTER_PORT": "1"},
     "MASTER_ADDR='10.0.0.5:29500' is neither a host name nor an IP address"),
    (None, {"ASYNCOLL_COORDINATOR": "::1:4100"}, "ASYNCOLL_COORDINATOR='::1:4100' is "
                                                  "ambiguous"),
])
def test_init_process_group_refuses_malformed_ipv6_with_a_sentence(init_method, environ,
                                                                   message):
    with pytest.raises(ConfigurationError) as info:
        resolve(None, init_method, 2, 0, 5.0, None, environ=environ)
    assert message in str(info.value)


def test_advertised_ipv6_address_may_come_in_brackets():
    plan = listen_plan("::1", environ={"ASYNCOLL_ADVERTISE_ADDR": "[fd00::2]"})
    assert (plan.advertise, plan.bind) == ("fd00::2", "fd00::2")
    assert listen_plan("::1", environ={}).advertise == "::1"
    with pytest.raises(ConfigurationError, match="ASYNCOLL_ADVERTISE_ADDR='fd00::2:30000'"):
        listen_plan("::1", environ={"ASYNCOLL_ADVERTISE_ADDR": "fd00::2:30000"})


def test_interface_without_ipv4_gives_its_global_ipv6_address(tmp_path, monkeypatch):
    table = tmp_path / "if_inet6"
    table.write_text("00000000000000000000000000000001 01 80 10 80       lo\n"
                     "fe8000000000000000fc00fffe000001 04 40 20 80     eth9\n"
                     "fd000000000000000000000000000002 04 40 00 82     eth9\n")
    monkeypatch.setattr(addresses, "_IF_INET6", str(table))
    assert addresses._global_ipv6_address("eth9") == "fd00::2"
    # Loopback's ::1 has host scope and link-local addresses need a scope: neither counts.
    assert addresses._global_ipv6_address("lo") is None
    assert addresses._global_ipv6_address("eth8") is None


def test_status_refuses_an_unbracketed_ipv6_coordinator(capsys):
    assert cli.main(["status", "--coordinator", "::1:29500"]) == 2
    assert "--coordinator='::1:29500' is ambiguous" in capsys.readouterr().err


def test_status_table_brackets_ipv6_data_addresses():
    members = (MemberStatus(0, "::1", 4000, "n", 1, "running", 3, 0.5),
               MemberStatus(1, "10.0.0.1", 4001, "n", 2, "running", 3, 0.5))
    text = cli.table([JobStatus("j", "running", 2, 1.0, members, ())])
    assert "[::1]:4000" in text and "10.0.0.1:4001" in text


@pytest.mark.parametrize("argv, message", [
    (["--coordinator", "::1:29500", "x.py"], "--coordinator='::1:29500' is ambiguous"),
    (["--master-addr", "[::1", "x.py"], "--master-addr='[::1' is not a host"),
])
def test_asyncoll_run_refuses_malformed_addresses_before_starting(argv, message):
    with pytest.raises(SystemExit) as info:
        run.main(argv)
    assert message in str(info.value.code)
