"""The dtype table: stable codes for the supported dtypes, refusals naming the rest."""

from __future__ import annotations

import numpy as np
import pytest

from asyncoll._wire.dtypes import SUPPORTED_DTYPES, dtype_code, dtype_from_code
from asyncoll.errors import ConfigurationError

pytestmark = pytest.mark.timeout(60)

# The wire codes are a protocol: a change here breaks old peers.
EXPECTED_CODES = {
    np.bool_: 1, np.int8: 2, np.int16: 3, np.int32: 4, np.int64: 5,
    np.uint8: 6, np.uint16: 7, np.uint32: 8, np.uint64: 9,
    np.float16: 10, np.float32: 11, np.float64: 12,
    np.complex64: 13, np.complex128: 14,
}


@pytest.mark.parametrize("dtype", SUPPORTED_DTYPES, ids=str)
def test_supported_dtype_round_trips_through_its_code(dtype: np.dtype) -> None:
    assert dtype_from_code(dtype_code(dtype)) == dtype


def test_wire_codes_are_the_stable_table() -> None:
    assert {np.dtype(t): c for t, c in EXPECTED_CODES.items()} == {
        dt: dtype_code(dt) for dt in SUPPORTED_DTYPES}


def test_codes_are_distinct() -> None:
    codes = [dtype_code(dt) for dt in SUPPORTED_DTYPES]

    assert len(set(codes)) == len(codes)


@pytest.mark.parametrize("spec", [np.float32, "float32", "<f4" if np.little_endian else ">f4",
                                  "=f4"])
def test_dtype_code_accepts_scalar_types_names_and_native_byte_order(spec: object) -> None:
    assert dtype_code(spec) == 11  # type: ignore[arg-type]


@pytest.mark.parametrize("spec", [object, str, "U3", "S4", "datetime64[s]", "timedelta64[ms]",
                                  "V8", [("a", "i4"), ("b", "f8")], np.longdouble,
                                  ">i4" if np.little_endian else "<i4",
                                  ">f8" if np.little_endian else "<f8"],
                         ids=["object", "str", "unicode", "bytes", "datetime64",
                              "timedelta64", "void", "structured", "longdouble",
                              "non-native-int32", "non-native-float64"])
def test_dtype_code_refuses_unsupported_dtypes_naming_them(spec: object) -> None:
    dtype = np.dtype(spec)  # type: ignore[call-overload]
    if dtype in SUPPORTED_DTYPES and dtype.isnative:  # longdouble == float64 on some platforms
        pytest.skip(f"{dtype} is a supported dtype on this platform")

    with pytest.raises(ConfigurationError, match="is not supported") as info:
        dtype_code(dtype)

    assert f"dtype {dtype}" in str(info.value)


def test_non_native_refusal_says_native_byte_order() -> None:
    swapped = np.dtype(np.int32).newbyteorder("S")

    with pytest.raises(ConfigurationError, match="native byte order") as info:
        dtype_code(swapped)

    assert str(swapped) in str(info.value)


def test_configuration_error_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        dtype_code(np.dtype(object))


@pytest.mark.parametrize("code", [0, 15, -1, 255, 2**32])
def test_dtype_from_code_refuses_unknown_codes_naming_them(code: int) -> None:
    with pytest.raises(ConfigurationError, match=f"unknown dtype code {code}"):
        dtype_from_code(code)
