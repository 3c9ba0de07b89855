"""One HTTP request's head, read into what the coordinator's HTTP server asks of it.

Pure: :func:`end_of_head` finds where a head ends in the bytes read so far,
:func:`parse` reads a whole head, and anything malformed raises
:class:`Refusal` with the 4xx status that answers it and words that say
why. The rules are HTTP/1.1's (RFC 9110, 9112) for the parts a read-only
server needs: a request line, header fields, the Host, and credentials
(``Authorization: Bearer``, scheme in any case, or ``?token=``), kept as
bytes so that a token in UTF-8 compares as sent.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import parse_qs, unquote, urlsplit

#: The most bytes of a request's head (431 past it), and of its target (414).
MAX_HEAD_BYTES = 65536
MAX_TARGET_BYTES = 8192
#: The most bytes before the request line's end: its target, a method and a version.
MAX_LINE_BYTES = MAX_TARGET_BYTES + 64

_HEAD_END = re.compile(rb"\r?\n\r?\n")
_LINE_END = re.compile(r"\r?\n")
_VERSION = re.compile(r"HTTP/\d\.\d")
_FIELD_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_TARGET = re.compile(r"[\x21-\x7e]+")


class Refusal(Exception):
    """A request refused before it is served: ``status`` ("400 Bad Request") and why."""

    def __init__(self, status: str, words: str) -> None:
        super().__init__(words)
        self.status = status
        self.words = words


@dataclass(frozen=True, slots=True)
class Request:
    """What the server needs of a request: a GET of ``path``, with its query and host."""

    path: str
    query: dict[str, str]
    #: The host it is for (the Host field's, or an absolute target's), lower case,
    #: without port or brackets; None when it names none.
    host: str | None
    #: Every token it carries: Bearer credentials and ``?token=``, as bytes.
    credentials: tuple[bytes, ...]


def end_of_head(buffer: bytes | bytearray, start: int = 0) -> int:
    """Where the head in ``buffer`` ends (after its blank line), or -1 if it has not yet.

    ``start``: the buffer's length before the last read, so that each read is
    searched once.
    """
    found = _HEAD_END.search(buffer, max(0, start - 3))
    return -1 if found is None else found.end()


def too_large(buffer: bytes | bytearray) -> Refusal | None:
    """The refusal of a head that, unfinished in ``buffer``, is already over a limit."""
    if b"\n" not in buffer[:MAX_LINE_BYTES] and len(buffer) > MAX_LINE_BYTES:
        return Refusal("414 URI Too Long", f"the request line is over {MAX_LINE_BYTES} "
                       f"bytes; the server reads targets of up to {MAX_TARGET_BYTES}")
    if len(buffer) > MAX_HEAD_BYTES:
        return Refusal("431 Request Header Fields Too Large", "the request's head is over "
                       f"{MAX_HEAD_BYTES} bytes, all that the server reads")
    return None


def parse(head: bytes) -> Request:
    """Read a whole head (request line, fields, blank line) into a :class:`Request`.

    Raises:
        Refusal: the head is malformed (400), too large (414, 431), or not a GET (405).
    """
    lines = _LINE_END.split(head.decode("latin-1"))
    words = lines[0].split(" ")
    if len(words) not in (2, 3) or (len(words) == 3 and not _VERSION.fullmatch(words[2])):
        raise Refusal("400 Bad Request", f"the request line {_shown(lines[0])} is not "
                      "'METHOD TARGET HTTP/x.y'")
    method, target = words[0], words[1]
    if len(target) > MAX_TARGET_BYTES:
        raise Refusal("414 URI Too Long", f"the request's target is {len(target)} bytes; "
                      f"the server reads targets of up to {MAX_TARGET_BYTES}")
    if method != "GET":
        raise Refusal("405 Method Not Allowed", "only GET is served: the dashboard and its "
                      "API read the coordinator's state, and change nothing")
    if not _TARGET.fullmatch(target) or not target.startswith(("/", "http://", "https://")):
        raise Refusal("400 Bad Request", f"the target {_shown(target)} is not a path "
                      "('/...') or an absolute URL of printable ASCII")
    try:
        url = urlsplit(target)
        given = None if not url.netloc else url.hostname
    except ValueError as exc:
        raise Refusal("400 Bad Request", f"the target {_shown(target)} is not a valid "
                      f"URL: {exc}") from None
    host, credentials = _fields([line for line in lines[1:] if line])
    query = {name: values[-1] for name, values in parse_qs(
        url.query, keep_blank_values=True, encoding="latin-1").items()}
    if "token" in query:
        credentials.append(query["token"].encode("latin-1"))
    return Request(path=unquote(url.path or "/"), query=query,
                   host=given if given is not None else host, credentials=tuple(credentials))


def _fields(lines: list[str]) -> tuple[str | None, list[bytes]]:
    """The Host (its name) and the Bearer credentials of a head's field lines."""
    host: str | None = None
    hosts = 0
    credentials: list[bytes] = []
    for line in lines:
        name, colon, value = line.partition(":")
        if not colon or not _FIELD_NAME.fullmatch(name):
            raise Refusal("400 Bad Request", f"the header line {_shown(line)} is not "
                          "'Name: value'")
        value = value.strip(" \t")
        name = name.lower()
        if name == "authorization":
            scheme, _, given = value.partition(" ")
            if scheme.lower() == "bearer":
                credentials.append(given.strip(" \t").encode("latin-1"))
        elif name == "host":
            hosts += 1
            host = _host_name(value)
    if hosts > 1:
        raise Refusal("400 Bad Request", f"the request has {hosts} Host fields; HTTP allows "
                      "one")
    return host, credentials


def _host_name(value: str) -> str | None:
    """The name in a Host field's value ("example.com:8080", "[::1]:80"), lower case."""
    if not value:
        return None
    try:
        name = urlsplit(f"//{value}").hostname
    except ValueError:
        name = None
    if name is None or not _TARGET.fullmatch(value):
        raise Refusal("400 Bad Request", f"the Host field {_shown(value)} is not a host "
                      "and port")
    return name


def _shown(text: str) -> str:
    """``text`` quoted for a message, cut to a readable length."""
    return repr(text if len(text) <= 80 else text[:80] + "...")
