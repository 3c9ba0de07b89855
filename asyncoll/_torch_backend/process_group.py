"""AsyncollProcessGroup: a torch.distributed ProcessGroup whose collectives are asyncoll's.

Its collectives are TorchCollectives' (asyncoll._torch_backend.collectives);
its abort, shutdown, get_error and shrink are its Recovery's
(asyncoll._torch_backend.fault_tolerance), and its reconfigure its
Reconfigurer's (asyncoll._torch_backend.reconfigure): torch's fault-tolerance API. Its rank and
size are read live, since a reconfigure changes them.
"""

from __future__ import annotations

from typing import Any

import torch.distributed as dist

from asyncoll._group.core import DONE
from asyncoll._group.delegate import Delegate, bind
from asyncoll._torch_backend import device_backend, split
from asyncoll._torch_backend.collectives import TorchCollectives
from asyncoll._torch_backend.fault_tolerance import Recoverable, Recovery, group_words
from asyncoll._torch_backend.reconfigure import Reconfigurer
from asyncoll._torch_backend.world import TorchWorld
from asyncoll.group import AsyncProcessGroup

_ProcessGroupBase: Any = dist.ProcessGroup


class AsyncollProcessGroup(TorchCollectives, Recoverable,
                           _ProcessGroupBase):  # type: ignore[misc]
    """One torch process group, run by an asyncoll group of the same members.

    Args:
        world: the asyncoll job and its threads.
        group: the asyncoll group (the job's world, or a group of its ranks).
        owns_world: shut the job down with this group (the default group, or a
            group that needed a job of its own).
    """

    get_reconfigure_handle = Delegate("_reconfigurer", Reconfigurer.get_reconfigure_handle)
    reconfigure = Delegate("_reconfigurer", Reconfigurer.reconfigure)

    def __init__(self, world: TorchWorld, group: AsyncProcessGroup, owns_world: bool) -> None:
        super().__init__(group.rank, group.size)
        self._world = world
        self._group = group
        self._owns_world = owns_world
        self._name = ""
        self._desc = ""
        self._named = group_words(group)
        self._latest = DONE
        self._recovery = Recovery(self)
        self._reconfigurer = Reconfigurer(self)
        bind(self)
        device_backend.attach(self)

    def split_group(self, ranks: list[int], timeout: Any = None, opts: Any = None,
                    group_name: str | None = None, group_desc: str | None = None,
                    device_types: Any = None) -> AsyncollProcessGroup | None:
        """A group of ``ranks`` of this one, or None on a rank not among them (torch's
        ``split_group``; asyncoll._torch_backend.split)."""
        made = split.split(self, ranks, timeout, group_name)
        if made is None:
            return None
        child = AsyncollProcessGroup(self._world, made, owns_world=False)
        if group_name:
            child._set_group_name(group_name)
        if group_desc:
            child._set_group_desc(group_desc)
        return child

    @property
    def supports_reconfigure(self) -> bool:
        """Whether reconfigure() can re-form this group (the default group of a torch job)."""
        return self._reconfigurer.supports_reconfigure

    def getRank(self) -> int:
        """This process's rank in the group (torch's ``rank()``), as of its last reconfigure."""
        return self._group.rank

    def getSize(self) -> int:
        """The group's size (torch's ``size()``), as of its last reconfigure."""
        return self._group.size

    def getBackendName(self) -> str:
        """The backend's name, "asyncoll"."""
        return "asyncoll"

    def name(self) -> str:
        """The backend's name, "asyncoll"."""
        return "asyncoll"

    def _set_group_name(self, name: str) -> None:
        # torch names the group after creating it; C++ keeps the name on the
        # group's backends, which torch < 2.14 cannot give it (device_backend).
        self._name = name
        super()._set_group_name(name)

    @property
    def group_name(self) -> str:
        """The name torch gave the group (its key in torch's registry of groups)."""
        return self._name

    def _set_group_desc(self, desc: str) -> None:
        self._desc = desc
        super()._set_group_desc(desc)

    @property
    def group_desc(self) -> str:
        """The description torch gave the group."""
        return self._desc

    def __repr__(self) -> str:
        return self._named
