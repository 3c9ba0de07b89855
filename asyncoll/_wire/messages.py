"""Control-plane messages between peers and the coordinator.

On the wire a message is a 4-byte big-endian length followed by a msgpack map
``{"t": <type>, "id": <request id>, ...fields}``. A reply carries the id of
its request; notices from the coordinator carry id 0. Every message is a
frozen dataclass; :func:`decode_body` validates the field types against the
dataclass annotations, so a malformed message is a ProtocolError, never a
crash further in.

The messages anyone may send without joining (a job's status, who is missing
from a rendezvous) are defined in :mod:`asyncoll._wire.status`, and those of
a restarted coordinator taking a job back in :mod:`asyncoll._wire.readoption`,
and the directory's (Welcome, Lookup) in :mod:`asyncoll._wire.directory`; all
are named here.
"""

from __future__ import annotations

import dataclasses
import struct
from dataclasses import dataclass
from typing import Any, ClassVar, Union

import msgpack  # type: ignore[import-untyped]

from asyncoll._defaults import HEARTBEAT_TIMEOUT_S
from asyncoll._wire.compact import pack_runs, unpack_runs
# Re-exported ("X as X"): every message is importable from this module.
from asyncoll._wire.directory import Address as Address
from asyncoll._wire.directory import Lookup as Lookup
from asyncoll._wire.directory import PeerInfo as PeerInfo
from asyncoll._wire.directory import Welcome as Welcome
from asyncoll._wire.readoption import Adopted as Adopted
from asyncoll._wire.readoption import GroupRecord as GroupRecord
from asyncoll._wire.readoption import Rejoin as Rejoin
from asyncoll._wire.status import DumpTrace as DumpTrace
from asyncoll._wire.status import GroupStatus as GroupStatus
from asyncoll._wire.status import JobStatus as JobStatus
from asyncoll._wire.status import MemberStatus as MemberStatus
from asyncoll._wire.status import MissingReply as MissingReply
from asyncoll._wire.status import Status as Status
from asyncoll._wire.status import StatusReply as StatusReply
from asyncoll._wire.status import StragglerStatus as StragglerStatus
from asyncoll._wire.status import WhoIsMissing as WhoIsMissing
from asyncoll.errors import ProtocolError

LENGTH = struct.Struct(">I")


@dataclass(frozen=True, slots=True)
class Join:
    """Peer -> coordinator: join job ``job``'s rendezvous.

    ``rank`` is -1 when the peer lets the coordinator choose. ``host``/``port``
    is the peer's data-plane address; ``timeout`` the rendezvous deadline in
    seconds, counted by the coordinator from the job's first join;
    ``heartbeat_timeout`` how long a member may stay silent before it is
    declared lost (the job's first peer sets it). ``elastic`` (0 or 1): on a
    running elastic job the peer becomes *pending* until a reconfigure
    admits it; ``min_size``/``max_size`` bound an elastic job's size (0: no
    bound; the job's first peer sets them). ``token`` names this process
    in reconfigures that list their members (a torch reconfigure handle's).
    """

    TYPE: ClassVar[str] = "join"
    job: str
    rank: int
    world_size: int
    host: str
    port: int
    hostname: str
    pid: int
    version: int
    timeout: float
    heartbeat_timeout: float = HEARTBEAT_TIMEOUT_S
    elastic: int = 0
    min_size: int = 0
    max_size: int = 0
    token: str = ""


@dataclass(frozen=True, slots=True)
class NewGroup:
    """Peer -> coordinator: this rank's next new_group call (every rank calls it)."""

    TYPE: ClassVar[str] = "new_group"
    #: The group's ranks, in order, as runs (:func:`asyncoll._wire.compact.pack_runs`).
    runs: tuple[int, ...]
    timeout: float

    @classmethod
    def of(cls, ranks: tuple[int, ...], timeout: float) -> NewGroup:
        """The request for a group of ``ranks``, in this order."""
        return cls(runs=pack_runs(ranks), timeout=timeout)

    @property
    def ranks(self) -> tuple[int, ...]:
        """The group's ranks (raises ProtocolError if the runs are malformed)."""
        return unpack_runs(self.runs)


@dataclass(frozen=True, slots=True)
class GroupCreated:
    """Coordinator -> peer: every rank agreed; the group's id."""

    TYPE: ClassVar[str] = "group_created"
    group_id: int
    #: The group's ranks, in order, as runs (see NewGroup).
    runs: tuple[int, ...]

    @classmethod
    def of(cls, group_id: int, ranks: tuple[int, ...]) -> GroupCreated:
        """The answer that group ``group_id`` of ``ranks`` exists."""
        return cls(group_id=group_id, runs=pack_runs(ranks))

    @property
    def ranks(self) -> tuple[int, ...]:
        """The group's ranks (raises ProtocolError if the runs are malformed)."""
        return unpack_runs(self.runs)


@dataclass(frozen=True, slots=True)
class Barrier:
    """Peer -> coordinator: this rank reached barrier number ``seq`` of a group."""

    TYPE: ClassVar[str] = "barrier"
    group_id: int
    seq: int
    timeout: float


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """Peer -> coordinator, every few seconds, unanswered: alive, ``ops`` operations so far.

    Also what the rank is doing: its oldest unfinished operation (``running``
    1), or else its last one (``group_id`` -1: none yet), started ``age_us``
    before ``clock_us``, the rank's clock when it sent this; and ``samples``,
    (group id, seq, when entered on the rank's clock, us) triples, flattened,
    of the operations it sampled since its last heartbeat (see
    asyncoll._rendezvous.stragglers).
    """

    TYPE: ClassVar[str] = "heartbeat"
    ops: int
    clock_us: int = 0
    group_id: int = -1
    seq: int = 0
    collective: str = ""
    running: int = 0
    age_us: int = 0
    samples: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Leave:
    """Peer -> coordinator: this rank is done with the job.

    ``ended`` is empty when its program left (destroy_process_group, or its
    end); else how its process is ending without having left (an uncaught
    exception, KeyboardInterrupt), and the others are told it was lost.
    """

    TYPE: ClassVar[str] = "leave"
    ended: str = ""


@dataclass(frozen=True, slots=True)
class Challenge:
    """Coordinator -> peer, first on every connection: prove the shared secret.

    ``required`` is 1 when the coordinator has a secret (the peer must answer
    with Proof before anything else), 0 when it has none.
    """

    TYPE: ClassVar[str] = "challenge"
    nonce: str
    required: int


@dataclass(frozen=True, slots=True)
class Proof:
    """The answer to a challenge: an HMAC, never the secret.

    Peer -> coordinator: answers the Challenge, and ``nonce`` challenges the
    coordinator back. Coordinator -> peer: answers that nonce (``nonce`` "").
    """

    TYPE: ClassVar[str] = "proof"
    response: str
    nonce: str


@dataclass(frozen=True, slots=True)
class CheckMembership:
    """Peer -> coordinator: has the membership changed? (every live member asks)."""

    TYPE: ClassVar[str] = "check_membership"
    timeout: float


@dataclass(frozen=True, slots=True)
class MembershipState:
    """Coordinator -> every member that asked: the same answer for all.

    ``changed`` (0 or 1): a member was lost or left, a process is pending, or
    a member has begun to reconfigure. ``epoch`` is the job's count of
    membership events when this was decided (see MembersPending).
    """

    TYPE: ClassVar[str] = "membership_state"
    changed: int
    generation: int
    gone: tuple[int, ...]
    pending: int
    epoch: int


@dataclass(frozen=True, slots=True)
class Reconfigure:
    """Peer -> coordinator: agree on the next membership (every live member asks;
    the pending peers take part without asking). Answered with a Welcome.

    ``host``/``port``: the data-plane address this member listens on in the
    next generation (each generation has connections of its own).

    By default the next membership is every live member that calls, and the
    pending peers. ``named`` (members' and pending peers' tokens) makes it
    exactly those processes, ranked in that order when ``ordered`` is 1;
    ``without`` (ranks of this generation) makes it the live members but
    those. Every caller must send the same terms; ``uuid`` tells two
    reconfigures apart (-1: none given).
    """

    TYPE: ClassVar[str] = "reconfigure"
    timeout: float
    host: str
    port: int
    named: tuple[str, ...] = ()
    ordered: int = 0
    without: tuple[int, ...] = ()
    uuid: int = -1


@dataclass(frozen=True, slots=True)
class MemberGone:
    """Coordinator -> every other member (a notice, id 0): rank ``rank`` is gone.

    ``how`` is "lost" (its connection broke or its heartbeats stopped; the
    reason says which, as the words after "was lost: ") or "left" (it left the job).
    """

    TYPE: ClassVar[str] = "member_gone"
    rank: int
    host: str
    hostname: str
    how: str
    reason: str
    epoch: int


@dataclass(frozen=True, slots=True)
class MembersLeft:
    """Coordinator -> every other member (a notice, id 0): these ranks left the job.

    In a job of more than 64 members, leaves that come together (a job
    ending) are told together, at most one notice per member and interval
    (see the coordinator's state), not one per member and leave. A lone
    leave and every loss are told at once, as a MemberGone. ``epoch`` is
    that of the newest leave told.
    """

    TYPE: ClassVar[str] = "members_left"
    #: The ranks, sorted, as runs (see NewGroup).
    runs: tuple[int, ...]
    epoch: int

    @property
    def ranks(self) -> tuple[int, ...]:
        """The ranks that left (raises ProtocolError if the runs are malformed)."""
        return unpack_runs(self.runs)


@dataclass(frozen=True, slots=True)
class MembersPending:
    """Coordinator -> every member (a notice, id 0): a process waits to join (elastic).

    ``epoch`` counts the job's membership events (a member gone, a process
    pending or giving up); a notice or answer with a higher one is newer. A
    member that has heard of an event newer than the last unchanged answer
    knows the membership may have changed, without asking.
    """

    TYPE: ClassVar[str] = "members_pending"
    pending: int
    epoch: int


@dataclass(frozen=True, slots=True)
class Ok:
    """Coordinator -> peer: the request succeeded and has nothing else to say."""

    TYPE: ClassVar[str] = "ok"


@dataclass(frozen=True, slots=True)
class Error:
    """Coordinator -> peer: the request failed; ``code`` maps to an exception class."""

    TYPE: ClassVar[str] = "error"
    code: str
    message: str


Message = Union[Join, Welcome, NewGroup, GroupCreated, Barrier, Heartbeat, Leave,
                CheckMembership, MembershipState, Reconfigure, MemberGone, MembersLeft,
                MembersPending, Rejoin, Adopted, Challenge, Proof, Ok, Error, Status,
                StatusReply, WhoIsMissing, MissingReply, DumpTrace, Lookup, Address]
_TYPES: dict[str, type[Any]] = {cls.TYPE: cls for cls in
                                (Join, Welcome, NewGroup, GroupCreated, Barrier, Heartbeat, Leave,
                                 CheckMembership, MembershipState, Reconfigure, MemberGone,
                                 MembersLeft, MembersPending, Rejoin, Adopted, Challenge, Proof,
                                 Ok, Error, Status, StatusReply, WhoIsMissing, MissingReply,
                                 DumpTrace, Lookup, Address)}
#: Records that appear inside messages, by the name their annotations use.
_RECORDS: dict[str, type[Any]] = {cls.__name__: cls for cls in
                                  (PeerInfo, MemberStatus, GroupStatus, JobStatus,
                                   GroupRecord, StragglerStatus)}


def encode(message: Message, request_id: int = 0) -> bytes:
    """Return the length-prefixed msgpack encoding of ``message``."""
    body = {"t": message.TYPE, "id": request_id}
    for name in _annotations(type(message)):
        body[name] = _to_plain(getattr(message, name))
    data: bytes = msgpack.packb(body, use_bin_type=True)
    return LENGTH.pack(len(data)) + data


def encode_head(message: Message) -> list[bytes]:
    """``message``'s encoding without its request id, in parts to send one after another.

    A message sent to many members (a group's creation, a notice) is encoded
    once, and :func:`frame` adds each one's request id. A large bytes field
    (a Welcome's directory) is a part of its own, the field's own object: the
    Welcomes of a thousand members then share one directory in memory.
    """
    names = _annotations(type(message))
    packer = msgpack.Packer(use_bin_type=True)
    parts: list[bytes] = []
    small = [packer.pack_map_header(len(names) + 2), packer.pack("t"),
             packer.pack(message.TYPE)]
    for name in names:
        value = getattr(message, name)
        small.append(packer.pack(name))
        if isinstance(value, bytes) and len(value) >= SHARED_BYTES:
            small.append(_bin_header(len(value)))
            parts += (b"".join(small), value)
            small = []
        else:
            small.append(packer.pack(_to_plain(value)))
    return [*parts, b"".join(small)]


def frame(head: list[bytes], request_id: int) -> list[bytes]:
    """The length-prefixed message, in parts, whose encoding without request id is ``head``."""
    tail: bytes = _ID_KEY + msgpack.packb(request_id)
    size = sum(len(part) for part in head) + len(tail)
    if len(head) == 1:
        return [LENGTH.pack(size) + head[0] + tail]
    return [LENGTH.pack(size) + head[0], *head[1:-1], head[-1] + tail]


def _bin_header(size: int) -> bytes:
    """msgpack's header of a bin of ``size`` bytes (bin 8, 16 or 32)."""
    if size < 1 << 8:
        return struct.pack(">BB", 0xC4, size)
    if size < 1 << 16:
        return struct.pack(">BH", 0xC5, size)
    return struct.pack(">BI", 0xC6, size)


#: Bytes fields at least this long are sent as their own object, not copied.
SHARED_BYTES = 4096
_ID_KEY: bytes = msgpack.packb("id")


def decode_body(data: bytes, max_bytes: int) -> tuple[int, Message]:
    """Decode one message body (without its length prefix).

    Returns:
        (request id, message).

    Raises:
        ProtocolError: the body is not a well-formed message of a known type.
    """
    if len(data) > max_bytes:
        raise ProtocolError(f"control message of {len(data)} bytes is over the limit of "
                            f"{max_bytes} bytes")
    try:
        body = msgpack.unpackb(data, raw=False, strict_map_key=True, max_array_len=max_bytes,
                               max_map_len=64, max_str_len=1 << 16, max_bin_len=max_bytes,
                               max_ext_len=0)
    except Exception as exc:  # msgpack raises several unrelated types
        raise ProtocolError(f"control message is not valid msgpack: {exc}") from exc
    if not isinstance(body, dict):
        raise ProtocolError(f"control message is a {type(body).__name__}, not a map")
    if not all(isinstance(key, str) for key in body):
        raise ProtocolError(f"control message has keys that are not strings: "
                            f"{sorted(repr(k) for k in body if not isinstance(k, str))}")
    kind = body.pop("t", None)
    request_id = body.pop("id", None)
    cls = _TYPES.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise ProtocolError(f"control message has unknown type {kind!r}")
    if not isinstance(request_id, int) or isinstance(request_id, bool) or request_id < 0:
        raise ProtocolError(f"{kind} message has a bad request id {request_id!r}")
    return request_id, _build(cls, body)


_ANNOTATIONS: dict[type[Any], dict[str, str]] = {}


def _annotations(cls: type[Any]) -> dict[str, str]:
    """A dataclass's fields and their annotations, in order, looked up once per class."""
    if cls not in _ANNOTATIONS:
        _ANNOTATIONS[cls] = {f.name: str(f.type) for f in dataclasses.fields(cls)}
    return _ANNOTATIONS[cls]


def _to_plain(value: Any) -> Any:
    if hasattr(type(value), "__dataclass_fields__"):
        return {name: _to_plain(getattr(value, name)) for name in _annotations(type(value))}
    if isinstance(value, tuple):
        return [_to_plain(v) for v in value]
    return value


def _build(cls: type[Any], body: dict[str, Any]) -> Any:
    fields = _annotations(cls)
    if body.keys() != fields.keys():
        missing = sorted(set(fields) - set(body))
        extra = sorted(set(body) - set(fields))
        raise ProtocolError(f"{cls.__name__} message has missing fields {missing} "
                            f"and unexpected fields {extra}")
    values = {name: _check(cls.__name__, name, annotation, body[name])
              for name, annotation in fields.items()}
    return cls(**values)


_SCALARS: dict[str, tuple[type, ...]] = {"int": (int,), "str": (str,), "float": (float, int),
                                         "bytes": (bytes,)}


def _check(owner: str, name: str, annotation: Any, value: Any) -> Any:
    # Annotations are strings (from __future__ import annotations): match on them.
    ann = str(annotation)
    if ann in _SCALARS:
        if isinstance(value, bool) or not isinstance(value, _SCALARS[ann]):
            raise ProtocolError(f"{owner}.{name} must be {ann}, got {value!r}")
        return float(value) if ann == "float" else value  # type: ignore[arg-type]
    if ann == "tuple[str, ...]":
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ProtocolError(f"{owner}.{name} must be a list of strings, got {value!r}")
        return tuple(value)
    if ann == "tuple[int, ...]":
        if not isinstance(value, list) or not all(
                isinstance(v, int) and not isinstance(v, bool) for v in value):
            raise ProtocolError(f"{owner}.{name} must be a list of ints, got {value!r}")
        return tuple(value)
    record = _RECORDS.get(ann.removeprefix("tuple[").removesuffix(", ...]"))
    if record is not None and ann.startswith("tuple["):
        if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
            raise ProtocolError(f"{owner}.{name} must be a list of maps, got {value!r}")
        return tuple(_build(record, dict(v)) for v in value)
    raise ProtocolError(f"{owner}.{name} has an annotation the decoder does not know: {ann}")
