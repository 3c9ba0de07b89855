"""asyncoll.errors: every class is listed where readers look, and wire codes stay pinned."""

from __future__ import annotations

import inspect

import pytest

from asyncoll import errors

pytestmark = pytest.mark.timeout(30)

#: Every control-plane code with the number it carries in an arena's control line, as
#: they must stay: peers of other versions send them. Add a new code with the next
#: number; never change a line.
PINNED = {
    "configuration": (1, "ConfigurationError"),
    "rendezvous": (2, "RendezvousError"),
    "rendezvous_timeout": (3, "RendezvousTimeoutError"),
    "authentication": (4, "AuthenticationError"),
    "collective": (5, "CollectiveError"),
    "peer_lost": (6, "PeerLostError"),
    "timeout": (7, "CollectiveTimeoutError"),
    "mismatch": (8, "MismatchError"),
    "group_broken": (9, "GroupBrokenError"),
    "protocol": (10, "ProtocolError"),
    "closed": (11, "ClosedError"),
    "excluded": (12, "ExcludedError"),
    "aborted": (13, "AbortedError"),
}


def _exception_classes() -> list[str]:
    return sorted(name for name, value in vars(errors).items()
                  if inspect.isclass(value) and issubclass(value, BaseException)
                  and value.__module__ == errors.__name__)


def _tree() -> str:
    doc = errors.__doc__ or ""
    return doc[doc.index("```text"):doc.index("```", doc.index("```text") + 1)]


def test_every_exception_class_is_in_all() -> None:
    assert [name for name in _exception_classes() if name not in errors.__all__] == []


def test_every_exception_class_is_in_the_docstrings_error_tree() -> None:
    tree_names = {word for line in _tree().splitlines() for word in line.split()}

    assert [name for name in _exception_classes() if name not in tree_names] == []


def test_wire_codes_and_numbers_are_the_pinned_ones() -> None:
    classes = {code: type(errors.error_from_code(code, "")) for code in PINNED}
    through_the_api = {code: (errors.error_number(cls), cls.__name__)
                       for code, cls in classes.items()}
    table = {code: (number, cls.__name__) for code, (number, cls) in errors._CODES.items()}

    assert through_the_api == PINNED
    assert table == PINNED


@pytest.mark.parametrize("code", sorted(PINNED))
def test_a_number_reads_back_as_its_code(code: str) -> None:
    number, _ = PINNED[code]

    assert errors.code_of_number(number) == code


@pytest.mark.parametrize("number", [0, 14, 255, -1])
def test_an_unknown_number_reads_as_a_collective_error(number: int) -> None:
    code = errors.code_of_number(number)

    assert code == "collective"
    assert type(errors.error_from_code(code, "from a newer peer")) is errors.CollectiveError


def test_an_unknown_code_becomes_a_rendezvous_error_with_its_message() -> None:
    error = errors.error_from_code("from_the_future", "a newer daemon refused this")

    assert type(error) is errors.RendezvousError
    assert str(error) == "a newer daemon refused this"


@pytest.mark.parametrize("cls, code", [(errors.MonitoredBarrierError, "timeout"),
                                       (errors.GroupBrokenByPeerLossError, "group_broken")])
def test_a_class_without_a_code_of_its_own_travels_as_its_nearest_base(
        cls: type[errors.AsyncollError], code: str) -> None:
    assert errors.error_code(cls) == code
    assert errors.error_number(cls) == PINNED[code][0]
