"""Reconfigure handles: what torch's _reconfigure passes between asyncoll's processes."""

from __future__ import annotations

import re

import pytest

from asyncoll._torch_backend.handles import (
    Handle,
    communicator_job,
    convener,
    in_rank_order,
    root_of,
)
from asyncoll.errors import ConfigurationError


def handle(root: str = "torch-1", token: str = "t0", host: str = "10.0.0.1", origin: int = 1
           ) -> Handle:
    return Handle(host, 29500, root, token, origin)


@pytest.mark.parametrize("made", [handle(), handle(root="a job/with:odd?chars&"),
                                  handle(host="::1")])
def test_a_handle_reads_back_as_it_was_made(made: Handle) -> None:
    assert Handle.parse(str(made)) == made


def test_a_handle_is_readable() -> None:
    assert str(handle(host="::1")) == "asyncoll://[::1]:29500/torch-1?token=t0&rank=1"


@pytest.mark.parametrize("text", ["garbage", "gloo:0:-1:0:", "asyncoll://h:1/job?rank=1",
                                  "asyncoll://h/job?token=t&rank=1",
                                  "asyncoll://h:1/?token=t&rank=1", "asyncoll://h:1/j?token=t",
                                  "tcp://h:1/job?token=t&rank=1", 7])
def test_what_is_not_a_handle_is_refused_naming_it(text: object) -> None:
    with pytest.raises(ConfigurationError, match=re.escape(f"{text!r} is not an asyncoll")):
        Handle.parse(text)


def test_a_communicator_is_named_after_its_uuid_and_keeps_its_root() -> None:
    job = communicator_job("torch-1", 601)
    assert job == "torch-1.reconfigure-601"
    assert root_of(job) == "torch-1" and root_of("torch-1") == "torch-1"
    assert root_of(communicator_job(root_of(job), 9)) == "torch-1"


def test_a_list_ranks_by_position_and_a_set_alike_on_every_process() -> None:
    members = [handle(token="c", origin=2), handle(token="a", origin=0),
               handle(root="solo", token="b", origin=0)]
    assert [h.token for h in in_rank_order(members, ordered=True)] == ["c", "a", "b"]
    shuffled = [members[2], members[0], members[1]]
    assert in_rank_order(members, False) == in_rank_order(shuffled, False)
    # The root most share first, in its ranks' order; the newcomer after.
    assert [h.token for h in in_rank_order(members, False)] == ["a", "c", "b"]
    assert convener(in_rank_order(members, True)).token == "c"
