"""How a wait on a group's direct links (asyncoll._transport.links) ends early.

The group layer (asyncoll._group.links_path) turns each into the group's
error: a lost peer, the ABORT of another member, a desync, a deadline.
"""

from __future__ import annotations


class LinkLost(Exception):
    """The connection to member ``index`` closed or broke: the member is lost to this one."""

    def __init__(self, index: int, reason: str) -> None:
        super().__init__(f"the direct connection to member {index} {reason}")
        self.index = index


class LinkAborted(Exception):
    """Member ``index`` gave up on operation ``operation`` with an error of code ``code``
    (asyncoll.errors.error_code; naming ``rank``), saying ``message``."""

    def __init__(self, index: int, operation: int, code: str, rank: int,
                 message: str = "") -> None:
        super().__init__(f"member {index} gave up on operation #{operation}: {message}")
        self.index, self.operation, self.code, self.rank = index, operation, code, rank
        self.message = message


class LinksExpired(Exception):
    """A wait's deadline passed; ``waiting_for`` names the members it waited for."""

    def __init__(self, waiting_for: list[int]) -> None:
        super().__init__(f"members {waiting_for} did not answer in time")
        self.waiting_for = waiting_for


class LinkMismatch(Exception):
    """Member ``index`` sent a record of another operation: ``theirs`` is its
    fingerprint, ``operation`` the number it carried."""

    def __init__(self, index: int, theirs: tuple[int, ...], nbytes: int,
                 operation: int) -> None:
        super().__init__(f"member {index} sent a record of another operation")
        self.index, self.theirs, self.nbytes = index, theirs, nbytes
        self.operation = operation
