"""asyncoll's errors through torch (asyncoll._torch_backend.errors): one class both torch's and
asyncoll's, per asyncoll class; message, attributes and cause kept."""

from __future__ import annotations

import pickle

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

from asyncoll._torch_backend.errors import (  # noqa: E402 - after the skip
    family,
    through_torch,
    torch_class,
    torch_error,
)
from asyncoll.errors import (  # noqa: E402
    AbortedError,
    AsyncollError,
    AuthenticationError,
    ClosedError,
    CollectiveTimeoutError,
    ConfigurationError,
    ExcludedError,
    GroupBrokenByPeerLossError,
    MismatchError,
    MonitoredBarrierError,
    PeerLostError,
    RendezvousTimeoutError,
)


@pytest.mark.parametrize(("kind", "torch_kind"), [
    (CollectiveTimeoutError, "DistBackendError"), (MismatchError, "DistBackendError"),
    (AbortedError, "DistBackendError"), (ConfigurationError, "DistBackendError"),
    (ClosedError, "DistBackendError"), (ExcludedError, "DistBackendError"),
    (MonitoredBarrierError, "DistBackendError"), (PeerLostError, "DistNetworkError"),
    (GroupBrokenByPeerLossError, "DistNetworkError"),
    (RendezvousTimeoutError, "DistStoreError"), (AuthenticationError, "DistStoreError")])
def test_each_asyncoll_error_becomes_the_torch_error_that_fits_and_stays_itself(
        kind: type[AsyncollError], torch_kind: str) -> None:
    original = kind("what happened, in full")
    error = torch_error(original)
    assert family(kind) is getattr(dist, torch_kind)
    assert isinstance(error, (kind, getattr(dist, torch_kind), RuntimeError))
    assert isinstance(error, kind) and isinstance(error, getattr(dist, torch_kind))
    assert str(error) == "what happened, in full"
    assert error.__cause__ is original


def test_the_class_is_made_once_per_asyncoll_class() -> None:
    first = torch_error(CollectiveTimeoutError("a"))
    assert type(torch_error(CollectiveTimeoutError("b"))) is type(first)
    assert torch_class(CollectiveTimeoutError) is type(first)
    assert type(torch_error(MismatchError("c"))) is not type(first)


def test_every_handler_catches_a_timeout_and_it_keeps_its_attributes() -> None:
    original = CollectiveTimeoutError("all_reduce did not complete. Timed out waiting 50ms")
    original.waiting_for, original.seconds = (1, 2), 0.05
    for handler in (RuntimeError, dist.DistBackendError, CollectiveTimeoutError,
                    TimeoutError):
        with pytest.raises(handler) as caught:
            raise torch_error(original)
        assert (caught.value.waiting_for, caught.value.seconds) == ((1, 2), 0.05)


def test_a_lost_peers_rank_and_host_survive_torch_and_pickling() -> None:
    error = torch_error(GroupBrokenByPeerLossError("peer 3 lost", rank=3, host="node-b"))
    again = pickle.loads(pickle.dumps(error))
    for e in (error, again):
        assert isinstance(e, PeerLostError) and isinstance(e, dist.DistNetworkError)
        assert (e.rank, e.host, str(e)) == (3, "node-b", "peer 3 lost")


def test_what_is_not_asyncolls_or_is_torchs_already_passes_unchanged() -> None:
    plain = ValueError("torch's own")
    converted = torch_error(MismatchError("m"))
    assert torch_error(plain) is plain
    assert torch_error(converted) is converted


def test_through_torch_converts_once_even_when_wrapped_methods_call_each_other() -> None:
    @through_torch
    def inner() -> None:
        raise ConfigurationError("rootRank 7 is not a rank of this group of 2; use 0 to 1")

    @through_torch
    def outer() -> None:
        inner()

    with pytest.raises(dist.DistBackendError) as caught:
        outer()
    assert isinstance(caught.value, ConfigurationError) and isinstance(caught.value, ValueError)
    cause = caught.value.__cause__
    assert type(cause) is ConfigurationError and cause.__cause__ is None
