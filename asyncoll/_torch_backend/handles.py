"""Reconfigure handles: how torch's ``_reconfigure`` names the processes of a communicator.

torch's programs exchange handles out of band (a store, a file, their own
service) and pass them to ``dist._reconfigure``; each one names a process
well enough for the others to meet it through asyncoll's coordinator:

    asyncoll://127.0.0.1:29500/torch-3f2a...?token=9c1e...&rank=2

The address of the coordinator the process hosts, the torch job the process started in (its
*root*), the process's token (random, sent in every Join, kept while it
lives) and its rank in the root job (what a set of handles ranks by). A
handle names a process, not a rank: it stays valid through any number of
reconfigures, whether or not the process was named in them.

A reconfigure forms one communicator of exactly the processes named: an
asyncoll job of its own, named after the uuid (:func:`communicator_job`),
on the coordinator of its first member (:func:`convener`). Processes not
named keep the communicator they had, and disjoint sets of processes may
form communicators of their own at the same time.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from urllib.parse import parse_qs, quote, unquote, urlparse

from asyncoll._wire.endpoint import join_host_port
from asyncoll.errors import ConfigurationError

SCHEME = "asyncoll"
#: What a communicator's job name puts between the root and the uuid.
SEPARATOR = ".reconfigure-"


@dataclass(frozen=True, slots=True)
class Handle:
    """One process of an asyncoll torch job, as a reconfigure handle names it."""

    host: str
    port: int
    root: str
    token: str
    #: The process's rank in its root job.
    origin: int

    def __str__(self) -> str:
        return (f"{SCHEME}://{join_host_port(self.host, self.port)}/{quote(self.root, safe='')}"
                f"?token={self.token}&rank={self.origin}")

    @classmethod
    def parse(cls, text: object) -> Handle:
        """The handle ``text`` stands for.

        Raises:
            ConfigurationError: ``text`` is not an asyncoll reconfigure handle.
        """
        handle: Handle | None = None
        try:
            url = urlparse(str(text))
            query = {k: v[-1] for k, v in parse_qs(url.query).items()}
            if url.scheme == SCHEME:
                handle = cls(str(url.hostname), int(url.port or 0), unquote(url.path[1:]),
                             query["token"], int(query["rank"]))
        except (ValueError, KeyError):
            handle = None
        if handle is None or not (handle.port and handle.root and handle.token):
            raise ConfigurationError(
                f"{text!r} is not an asyncoll reconfigure handle (asyncoll://host:port/job"
                "?token=...&rank=...): pass what get_reconfigure_handle() returned on each "
                "process")
        return handle


def root_of(job: str) -> str:
    """The torch job that the communicator job ``job`` descends from (``job`` for a root)."""
    return job.split(SEPARATOR, 1)[0]


def communicator_job(root: str, uuid: int) -> str:
    """The asyncoll job name of the communicator ``uuid`` formed from processes of ``root``."""
    return f"{root}{SEPARATOR}{uuid}"


def in_rank_order(handles: list[Handle], ordered: bool) -> list[Handle]:
    """The communicator's members by rank: a list's order; for a set, an order every
    process computes alike: the processes of the root most of them share first, each
    root's by their ranks in it (so survivors keep their order, newcomers come after)."""
    if ordered:
        return list(handles)
    counts = Counter(h.root for h in handles)
    return sorted(handles, key=lambda h: (-counts[h.root], h.root, h.origin, h.token))


def convener(members: list[Handle]) -> Handle:
    """Whose coordinator and root the communicator of ``members`` (in rank order) forms on:
    the first member's."""
    return members[0]
