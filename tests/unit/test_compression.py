"""The compressed all_reduce's codecs: each value within its bound, specials exact.

bf16 is checked against its definition (the nearer of the two bfloat16 values
around each float32, ties to the even one); int8 against its per-block bound.
"""

from __future__ import annotations

import numpy as np
import pytest

from asyncoll._algorithms.compression import (DEFAULT_BLOCK, Compression, codec, error_bound,
                                              relative_step)
from asyncoll.errors import ConfigurationError

_RNG = np.random.default_rng(61)


def _roundtrip(mode: str, values: np.ndarray, block: int = DEFAULT_BLOCK) -> np.ndarray:
    coder = codec(mode, values.dtype, block)
    payload = np.empty(coder.encoded_bytes(values.size), np.uint8)
    coder.encode(values, payload)
    out = np.empty_like(values)
    coder.decode(payload, out)
    return out


def _bf16_neighbours(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The bfloat16 values at or below and above each float32's magnitude."""
    bits = values.view(np.uint32)
    low = (bits & np.uint32(0xFFFF0000)).view(np.float32)
    high = ((bits & np.uint32(0xFFFF0000)) + np.uint32(0x10000)).view(np.float32)
    return low, high


def _interesting_float32s() -> np.ndarray:
    random = _RNG.standard_normal(20000).astype(np.float32) * np.float32(1e3)
    bits = _RNG.integers(0, 2**32, 20000, dtype=np.uint64).astype(np.uint32)
    anywhere = bits.view(np.float32)
    ties = (np.arange(1000, dtype=np.uint32) << 16 | np.uint32(0x8000)).view(np.float32)
    edges = np.array([0.0, -0.0, 1e-45, -1e-45, 1.1754944e-38, 3.3895314e38, 3.4028235e38,
                      -3.4028235e38, 1.0, -1.0], np.float32)
    values = np.concatenate([random, anywhere, ties, edges])
    return values[np.isfinite(values)]


def test_bf16_rounds_each_float32_to_the_nearer_bfloat16_ties_to_even():
    values = _interesting_float32s()
    below_max = np.abs(values) < np.float32(3.3961e38)  # past it, rounding would reach inf

    decoded = _roundtrip("bf16", values[below_max])

    low, high = _bf16_neighbours(values[below_max])
    x = values[below_max].astype(np.float64)
    to_low, to_high = np.abs(x - low), np.abs(x - high.astype(np.float64))
    expected = np.where(to_low < to_high, low, high)
    even = (low.view(np.uint32) >> 16) % 2 == 0
    expected = np.where(to_low == to_high, np.where(even, low, high), expected)
    np.testing.assert_array_equal(decoded.view(np.uint32), expected.view(np.uint32))


def test_bf16_keeps_the_largest_finite_values_finite_and_specials_as_they_are():
    values = np.array([3.4028235e38, -3.4028235e38, 3.39e38, np.inf, -np.inf, np.nan],
                      np.float32)
    nan_payload = np.array([0x7F800001, 0xFFFFFFFF], np.uint32).view(np.float32)

    decoded = _roundtrip("bf16", np.concatenate([values, nan_payload]))

    assert np.isfinite(decoded[:3]).all()
    assert decoded[0] == -decoded[1] == np.float32(3.3895314e38)
    assert abs(decoded[2] - values[2]) <= 2.0 ** -8 * values[2]
    assert decoded[3] == np.inf and decoded[4] == -np.inf
    assert np.isnan(decoded[5:]).all()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("block", [1, 8, 256])
def test_int8_gives_each_value_within_half_a_step_of_its_block_s_largest(dtype, block):
    values = (_RNG.standard_normal(3001) * _RNG.choice([1e-30, 1.0, 1e20], 3001)).astype(dtype)

    decoded = _roundtrip("int8", values, block)

    padded = np.concatenate([np.abs(values), np.zeros(-values.size % block, dtype)])
    largest = np.repeat(padded.reshape(-1, block).max(axis=1), block)[:values.size]
    step = relative_step("int8", np.dtype(dtype))
    assert (np.abs(decoded - values) <= step * largest + np.finfo(dtype).tiny).all()


@pytest.mark.parametrize("values", [
    np.full(600, 3.25, np.float32),
    np.zeros(600, np.float32),
    np.r_[np.float32(1e30), np.ones(599, np.float32)],
    np.full(600, 1e-40, np.float32),  # subnormal: the scale stops at the smallest normal
], ids=["all equal", "zeros", "one huge", "subnormal"])
def test_int8_holds_its_bound_on_adversarial_blocks(values):
    decoded = _roundtrip("int8", values)

    largest = np.repeat([np.abs(values[i:i + DEFAULT_BLOCK]).max()
                         for i in range(0, values.size, DEFAULT_BLOCK)], DEFAULT_BLOCK)
    bound = relative_step("int8", values.dtype) * largest[:values.size]
    assert (np.abs(decoded - values) <= bound + np.finfo(np.float32).tiny).all()


def test_int8_carries_nan_and_infinities_exactly_and_the_rest_of_their_block_as_ever():
    values = np.linspace(-1, 1, 300).astype(np.float32)
    values[[3, 10, 299]] = [np.nan, np.inf, -np.inf]

    decoded = _roundtrip("int8", values)

    assert np.isnan(decoded[3]) and decoded[10] == np.inf and decoded[299] == -np.inf
    finite = np.isfinite(values)
    assert (np.abs(decoded[finite] - values[finite]) <= relative_step("int8", values.dtype)).all()


def test_the_bound_grows_with_the_members_and_the_magnitudes():
    one = error_bound("bf16", np.dtype(np.float32), 2, np.array([1.0]))
    assert one[0] == pytest.approx(2 * relative_step("bf16", np.dtype(np.float32)), rel=0.01)
    assert error_bound("bf16", np.dtype(np.float32), 8, np.array([1.0]))[0] > 4 * one[0]
    assert error_bound("int8", np.dtype(np.float64), 4, np.array([0.0]))[0] > 0


@pytest.mark.parametrize("mode, dtype, words", [
    ("zstd", np.float32, "not one of bf16, int8"),
    ("bf16", np.float64, "float32's range"),
    ("int8", np.int32, "integers"),
    ("int8", np.float16, "half floats"),
])
def test_a_mode_or_dtype_the_codecs_cannot_hold_is_refused_with_a_sentence(mode, dtype, words):
    with pytest.raises(ConfigurationError, match=words):
        codec(mode, np.dtype(dtype))


@pytest.mark.parametrize("block", [0, -3, 2.5, 6, 8192])
def test_an_int8_block_that_is_no_power_of_two_up_to_4096_is_refused(block):
    with pytest.raises(ConfigurationError, match="power of two"):
        codec("int8", np.dtype(np.float32), block)


def test_the_codecs_send_a_half_and_about_a_quarter_of_float32_s_bytes():
    assert codec("bf16", np.dtype(np.float32)).ratio() == 0.5
    assert codec("int8", np.dtype(np.float32)).ratio() == pytest.approx(0.254, abs=0.001)


def test_a_compression_keeps_a_residual_only_with_error_feedback_and_per_shape():
    plain, fed = Compression("int8"), Compression("bf16", error_feedback=True)
    x = np.ones(10, np.float32)

    assert plain.residual(x) is None
    first = fed.residual(x)
    assert first is not None and first.tolist() == [0.0] * 10
    first += 1
    assert fed.residual(x) is first  # kept for the next call like it
    assert fed.residual(np.ones(11, np.float32)).tolist() == [0.0] * 11  # another size
    assert repr(fed) == "Compression('bf16', block=256, error_feedback=True)"


def test_a_compression_with_a_bad_mode_or_block_is_refused_when_made():
    with pytest.raises(ConfigurationError, match="not one of"):
        Compression("fp8")
    with pytest.raises(ConfigurationError, match="power of two"):
        Compression("int8", block=100)
