"""Reconfigure handles: how torch's ``_reconfigure`` names the processes of a group.

torch's programs exchange handles out of band (a store, a file, their own
service) and pass them to ``dist._reconfigure``; each one names a process
well enough for the others to find it through asyncoll's coordinator:

    asyncoll://127.0.0.1:29500/torch-3f2a...?token=9c1e...&rank=2&size=3&generation=1

The coordinator's address and the job, the process's token (random, sent in
its Join, kept while it lives), and its rank, the job's size and generation
when the handle was made. A handle names a process, not a rank: an older
handle of a live process still names it. A process alone in its job is a
newcomer: a reconfigure that names it with members of a larger job moves it
into that job (:func:`target`).
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qs, quote, unquote, urlparse

from asyncoll._wire.endpoint import join_host_port
from asyncoll.errors import ConfigurationError

SCHEME = "asyncoll"


@dataclass(frozen=True, slots=True)
class Handle:
    """One process of an asyncoll job, as a reconfigure handle names it."""

    host: str
    port: int
    job: str
    token: str
    rank: int
    size: int
    generation: int

    def __str__(self) -> str:
        return (f"{SCHEME}://{join_host_port(self.host, self.port)}/{quote(self.job, safe='')}"
                f"?token={self.token}&rank={self.rank}&size={self.size}"
                f"&generation={self.generation}")

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
                             query["token"], int(query["rank"]), int(query["size"]),
                             int(query["generation"]))
        except (ValueError, KeyError):
            handle = None
        if handle is None or not (handle.port and handle.job and handle.token):
            raise ConfigurationError(
                f"{text!r} is not an asyncoll reconfigure handle (asyncoll://host:port/job"
                "?token=...): pass what get_reconfigure_handle() returned on each process")
        return handle


def target(handles: list[Handle]) -> Handle:
    """A handle of the job that the processes ``handles`` name form their group in.

    That is the one job of more than one process among them; when each is alone
    in its own, the first handle's.

    Raises:
        ConfigurationError: they name processes of several jobs of more than one.
    """
    larger = {h.job: h for h in handles if h.size > 1}
    if len(larger) > 1:
        raise ConfigurationError(f"the reconfigure handles name processes of {len(larger)} "
                                 f"running jobs ({sorted(larger)}): a group is formed within "
                                 "one job, which only processes alone in theirs may join")
    return next(iter(larger.values()), handles[0])
