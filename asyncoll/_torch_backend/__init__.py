"""asyncoll as a torch.distributed backend: ``init_process_group(backend="asyncoll")``.

Install with ``pip install "asyncoll[torch]"``; torch then loads the backend
itself (the ``torch.backends`` entry point). Modules: ``registration`` (the
entry point and the creator torch calls per group), ``world`` (the asyncoll
job, joined through torch's store, and its threads), ``process_group`` (the
ProcessGroup torch calls), ``collectives`` (its collective methods),
``device_backend`` (the c10d Backend it registers for "cpu", which torch 2.14
looks up, and which runs the group's operations), ``work`` (its Work),
``errors`` (asyncoll's errors as torch's), ``dtypes`` (bfloat16); torch's fault-tolerance
API: ``fault_tolerance`` (abort, get_error, shrink_group), ``reconfigure`` and
``handles`` (``_reconfigure``), ``group_ids``.
"""

from __future__ import annotations

from asyncoll._torch_backend.registration import BACKEND_NAME, load, register

__all__ = ["BACKEND_NAME", "load", "register"]
