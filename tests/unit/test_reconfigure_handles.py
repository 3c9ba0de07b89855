"""Reconfigure handles: what torch's _reconfigure passes between asyncoll's processes."""

from __future__ import annotations

import re

import pytest

from asyncoll._torch_backend.handles import Handle, target
from asyncoll.errors import ConfigurationError


def handle(job: str = "torch-1", size: int = 3, token: str = "t0", host: str = "10.0.0.1"
           ) -> Handle:
    return Handle(host, 29500, job, token, 1, size, 2)


@pytest.mark.parametrize("made", [handle(), handle(job="a job/with:odd?chars&"),
                                  handle(host="::1")])
def test_a_handle_reads_back_as_it_was_made(made: Handle) -> None:
    assert Handle.parse(str(made)) == made


def test_a_handle_is_readable() -> None:
    assert str(handle(host="::1")) == ("asyncoll://[::1]:29500/torch-1?token=t0&rank=1&size=3"
                                       "&generation=2")


@pytest.mark.parametrize("text", ["garbage", "gloo:0:-1:0:", "asyncoll://h:1/job?rank=1",
                                  "asyncoll://h/job?token=t&rank=1&size=1&generation=0",
                                  "asyncoll://h:1/?token=t&rank=1&size=1&generation=0",
                                  "tcp://h:1/job?token=t&rank=1&size=1&generation=0", 7])
def test_what_is_not_a_handle_is_refused_naming_it(text: object) -> None:
    with pytest.raises(ConfigurationError, match=re.escape(f"{text!r} is not an asyncoll")):
        Handle.parse(text)


def test_the_group_forms_in_the_one_job_of_more_than_one_process() -> None:
    members = [handle(token="a"), handle(token="b")]
    newcomer = handle(job="solo", size=1, token="c")
    assert target([newcomer, *members]).job == "torch-1"
    assert target([handle(job="x", size=1), handle(job="y", size=1)]).job == "x"
    with pytest.raises(ConfigurationError, match="processes of 2 running jobs"):
        target([*members, handle(job="other", token="d")])
