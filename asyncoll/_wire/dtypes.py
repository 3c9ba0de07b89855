"""The table of element types asyncoll moves, with stable wire codes."""

from __future__ import annotations

from typing import Any

import numpy as np

from asyncoll.errors import ConfigurationError

# Wire code -> numpy dtype. Codes are stable: never renumber.
_CODE_TO_DTYPE: dict[int, np.dtype[Any]] = {
    1: np.dtype(np.bool_),
    2: np.dtype(np.int8),
    3: np.dtype(np.int16),
    4: np.dtype(np.int32),
    5: np.dtype(np.int64),
    6: np.dtype(np.uint8),
    7: np.dtype(np.uint16),
    8: np.dtype(np.uint32),
    9: np.dtype(np.uint64),
    10: np.dtype(np.float16),
    11: np.dtype(np.float32),
    12: np.dtype(np.float64),
    13: np.dtype(np.complex64),
    14: np.dtype(np.complex128),
}
_DTYPE_TO_CODE = {dt: code for code, dt in _CODE_TO_DTYPE.items()}

SUPPORTED_DTYPES: tuple[np.dtype[Any], ...] = tuple(_CODE_TO_DTYPE.values())


def dtype_code(dtype: np.dtype[Any]) -> int:
    """Return the wire code of a supported dtype (native byte order).

    Raises:
        ConfigurationError: the dtype is not one asyncoll moves.
    """
    if dtype in _DTYPE_TO_CODE:  # the common case: a native dtype object, no conversion
        return _DTYPE_TO_CODE[dtype]
    code = _DTYPE_TO_CODE.get(np.dtype(dtype).newbyteorder("="))
    if code is None or not np.dtype(dtype).isnative:
        names = ", ".join(str(d) for d in SUPPORTED_DTYPES)
        raise ConfigurationError(
            f"dtype {np.dtype(dtype)} is not supported; use one of {names} "
            "in native byte order")
    return code


def dtype_from_code(code: int) -> np.dtype[Any]:
    """Return the dtype a wire code stands for.

    Raises:
        ConfigurationError: the code is unknown.
    """
    try:
        return _CODE_TO_DTYPE[code]
    except KeyError:
        raise ConfigurationError(f"unknown dtype code {code}") from None
