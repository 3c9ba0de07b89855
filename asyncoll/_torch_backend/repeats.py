"""Repeated torch backend calls: the tensors the group's repeats take, seen as numpy.

A torch call that repeats the signature of an earlier one the group ran on its
fast path (the same collective, dtype, size and op, the group's timeout)
runs again in this thread without being made anew, through the repeat check
the blocking API uses too (asyncoll._group.repeats.ran_again). Only tensors
whose memory numpy can use as it is qualify; anything else takes the full
path, which checks it and says what is wrong.
"""

from __future__ import annotations

from typing import Any
import weakref

from numpy.typing import NDArray
import torch

from asyncoll._algorithms.ops import coerce_op
from asyncoll._group.core import DONE, failed
from asyncoll._group.repeats import ran_again
from asyncoll._torch_backend.work import AsyncollWork
from asyncoll.errors import AsyncollError
from asyncoll.types import ReduceOp

_STRIDED, _BFLOAT16 = torch.strided, torch.bfloat16


def flat_array(tensor: Any) -> NDArray[Any] | None:
    """``tensor``'s memory as a 1-D numpy array, for a dense contiguous CPU tensor numpy
    can view (not bfloat16, no lazy conjugate or negation bit); else None."""
    if not isinstance(tensor, torch.Tensor) or not tensor.is_cpu or \
            tensor.layout is not _STRIDED or tensor.dtype is _BFLOAT16 or \
            not tensor.is_contiguous() or tensor.is_conj() or tensor.is_neg():
        return None
    try:
        array: NDArray[Any] = tensor.detach().numpy()
    except (TypeError, RuntimeError):
        return None  # a dtype numpy lacks: the full path says so
    return array if array.ndim == 1 else array.reshape(-1)


class LastFlat:
    """:func:`flat_array` of the tensor a group's call took last, kept while that
    tensor is the same memory seen the same way: a program repeating a call on
    one tensor (a gradient bucket, a loss) then skips making numpy's view anew.

    The tensor is held weakly, and the view is dropped when it goes (the
    view keeps its memory: the group must not, once the program let go of
    it). Its data pointer, shape, dtype and contiguity are compared at each
    call (``set_``, ``resize_`` and ``.data =`` change them), and the view is
    made anew where one differs. Complex tensors are not kept: ``.data =
    t.conj()`` would change only their conjugate bit.
    """

    __slots__ = ("_tensor", "_seen", "_array")

    def __init__(self) -> None:
        self._tensor: weakref.ref[Any] | None = None
        self._seen: tuple[Any, ...] = ()
        self._array: NDArray[Any] | None = None

    def of(self, tensor: Any) -> NDArray[Any] | None:
        """flat_array(tensor), from the last call's where ``tensor`` is that one's."""
        last = self._tensor  # (id: "is" would narrow tensor to the referent's type)
        if last is not None and id(last()) == id(tensor) and self._seen == (
                tensor.data_ptr(), tensor.shape, tensor.dtype, tensor.is_contiguous()):
            return self._array
        array = flat_array(tensor)
        if array is None or array.dtype.kind == "c":
            return array
        self._tensor = weakref.ref(tensor, self._forget)
        self._seen = (tensor.data_ptr(), tensor.shape, tensor.dtype, True)
        self._array = array
        return array

    def _forget(self, gone: weakref.ref[Any]) -> None:
        if self._tensor is gone:
            self._tensor, self._seen, self._array = None, (), None


def blocking_all_reduce(owner: Any, tensor: Any, opts: Any) -> tuple[bool, AsyncollWork | None]:
    """Whether torch's blocking all_reduce of ``tensor`` with ``opts`` ran in this
    thread, as a repeat, through the compiled entry of ``owner``'s group (the
    TorchCollectives making the call), and its Work, as :func:`again`: a training
    loop's call, checked in the fewest steps (each pybind read of ``opts`` costs
    0.1-0.4 us). Only a call with no deadline of its own or of set_timeout's, of an
    op seen before, qualifies; (False, None), having done nothing, otherwise."""
    express = owner._group.express
    if express is None or opts.asyncOp or owner._default_limit is not None or \
            opts.timeout != _UNSET_TIMEOUT:
        return False, None
    op = _OPS.get(opts.reduceOp.op)
    array = None if op is None else _last(owner).of(tensor)
    try:
        return array is not None and bool(express.all_reduce(array, op)), None
    except AsyncollError as exc:
        return True, _failed(owner, "allreduce", tensor, exc)


def again(owner: Any, what: str, tensor: Any, collective: str, op: Any = None,
          limit: float | None = None, blocking: bool = False,
          root: int = -1) -> tuple[bool, AsyncollWork | None]:
    """Whether ``owner``'s call ``what`` (torch's name) ran in this thread as a repeat
    (:func:`ran_in_this_thread`), and its Work: none for a ``blocking`` call that
    succeeded, one whose wait() raises for one that failed. (False, None), having
    done nothing, where it did not."""
    try:
        if not ran_in_this_thread(owner._group, _last(owner), collective, tensor, op, root,
                                  limit):
            return False, None
    except AsyncollError as exc:
        return True, _failed(owner, what, tensor, exc)
    return True, None if blocking else AsyncollWork(
        DONE, [] if tensor is None else [tensor], f"{what} on {owner._named}", owner._world)


def _last(owner: Any) -> LastFlat:
    last: LastFlat | None = owner._flat
    if last is None:
        last = owner._flat = LastFlat()
    return last


def _failed(owner: Any, what: str, tensor: Any, exc: AsyncollError) -> AsyncollWork:
    """The Work of a repeat that raised ``exc``: wait() raises it, as from the loop."""
    owner._failed_in_this_thread(exc)
    return AsyncollWork(failed(exc), [] if tensor is None else [tensor],
                        f"{what} on {owner._named}", owner._world)


def ran_in_this_thread(group: Any, last: LastFlat, collective: str, tensor: Any, op: Any,
                       root: int, limit: float | None) -> bool:
    """Whether ``tensor``'s call (None: a barrier's) ran in this thread as a repeat of
    an earlier one on ``group``: asyncoll's ``collective``, ``tensor``'s dtype and
    size (seen through ``last``), ``op``, global rank ``root`` (-1: none), within
    ``limit`` seconds (None: the group's timeout). False, having done nothing,
    otherwise; it raises what the repeat raised."""
    if tensor is None:
        return ran_again(group, collective, None, op, root, limit)
    array = last.of(tensor)
    return array is not None and ran_again(group, collective, array, op, root, limit)


def reduce_op(op: Any) -> ReduceOp | None:
    """asyncoll's ReduceOp for torch's ``op``, or None where it has none."""
    try:
        return _OPS[op]
    except (KeyError, TypeError):  # not seen yet, or not hashable
        pass
    try:
        ours: ReduceOp | None = coerce_op(op)
    except AsyncollError:
        ours = None
    try:
        if len(_OPS) < 64:
            _OPS[op] = ours
    except TypeError:
        pass
    return ours


# torch's ops (RedOpType) seen so far: reading one's name through pybind costs microseconds.
_OPS: dict[Any, ReduceOp | None] = {}
# The timeout of options that set none (torch's kUnsetTimeout).
_UNSET_TIMEOUT = torch.distributed.AllreduceOptions().timeout
