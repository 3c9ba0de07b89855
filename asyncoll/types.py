"""Public value types shared by every layer: the reduce operations."""

from __future__ import annotations

import enum

__all__ = ["ReduceOp"]


class ReduceOp(enum.Enum):
    """How all_reduce combines the ranks' values, as torch.distributed.ReduceOp.

    `AVG` sums then divides by the group size. Like torch's gloo backend,
    which fails with "result type Float can't be cast to the desired output
    type" after communicating, it is defined for floating and complex arrays
    only; asyncoll refuses integer and bool arrays with ConfigurationError
    before sending anything. The bitwise ops take integer and bool arrays only,
    and MIN/MAX refuse complex arrays, as torch does.
    """

    SUM = 0
    PRODUCT = 1
    MIN = 2
    MAX = 3
    BAND = 4
    BOR = 5
    BXOR = 6
    AVG = 7

    # Enum hashes a member by its name, in Python; members are singletons
    # compared by identity, so identity's hash (in C) agrees with equality and
    # keeps the dictionary lookups of every small collective cheap.
    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return f"<ReduceOp.{self.name}>"

    def __str__(self) -> str:
        return f"ReduceOp.{self.name}"
