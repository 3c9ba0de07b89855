"""What a compressed all_reduce sends in place of its partial sums: the codecs.

A codec turns a 1-D float array into bytes and back. The compressed ring
(compressed_ring.py) encodes each partial sum it passes on, adds what it
decodes to its own data in the input's precision, and encodes each finished
block once: every member decodes the same bytes, so every member ends with
the same bits.

``bf16`` (float32 only) keeps each value's top 16 bits, rounded to nearest
even: 2 bytes a value. A finite value past bfloat16's largest becomes that
largest value, not infinity; NaN stays NaN and infinities stay infinite.

``int8`` (float32 and float64) cuts the array into blocks of ``block``
values (in the ring, from the start of each member's part); each block sends
its scale ``s`` (the largest finite magnitude over 126, in the input's
dtype, at least the dtype's smallest normal number) and one byte a value,
``round(x / s)`` in -126..126. The other three byte values carry what no
scale can: -128 NaN, -127 minus infinity, 127 plus infinity; they come
through exactly.

Error bounds. Over a ring of n members, the sums of element e are encoded n
times (n - 1 partial sums, then the result), each encoding and the addition
after it adding at most ``r`` times the magnitude of what they handle (bf16:
the partial sum at e; int8: the largest in e's block). That magnitude is at
most ``A (1 + r) ** (k - 1)`` at the k-th encoding, and summing the n errors
gives the bound below. With ``A`` = the sum over members of |x| at e (bf16),
or the sum over members of the largest finite |x| in e's block (int8), the
result differs from the exact sum by at most ``((1 + r) ** n - 1) * A``
plus, for int8, ``n`` times the dtype's smallest normal number, where

- bf16: ``r = 2**-8 + 2**-22``;
- int8: ``r = 1/252 + 2**-22`` (float32) or ``1/252 + 2**-51`` (float64).

(2**-22 and 2**-51: two roundings of the input's precision, the
addition's and the decoding's.) AVG divides that by n, and rounds once more.

``error_bound`` computes it. While nothing overflows, NaN and infinities
come through as the uncompressed sum gives them.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import NDArray

from asyncoll.errors import ConfigurationError
from asyncoll.types import ReduceOp

#: The codecs by name.
MODES = ("bf16", "int8")
#: Values that share one scale in int8, unless the caller says otherwise, and
#: the most (a power of two, as every block is: fingerprints carry its log).
DEFAULT_BLOCK = 256
MAX_BLOCK = 4096
#: The largest code int8 gives a finite value; the rest mean NaN and infinities.
_LARGEST = 126
_NAN, _MINUS_INF, _PLUS_INF = -128, -127, 127
#: bfloat16's largest finite value, with its sign bit clear (0x7F7F), and the
#: largest float32 magnitude (its bits) that rounds to at most that value.
_BF16_MAX, _ROUNDS_PAST_MAX = np.uint16(0x7F7F), 0x7F7F7FFF


class Codec:
    """One mode's encoding of ``dtype`` arrays: sizes, encode and decode."""

    name = ""

    def __init__(self, dtype: np.dtype[Any]) -> None:
        self.dtype = dtype

    def encoded_bytes(self, count: int) -> int:
        """Bytes that ``count`` values encode to."""
        raise NotImplementedError

    def encode(self, values: NDArray[Any], out: NDArray[np.uint8]) -> None:
        """Write ``values``' encoding into ``out`` (``encoded_bytes(values.size)`` bytes)."""
        raise NotImplementedError

    def decode(self, payload: NDArray[np.uint8], out: NDArray[Any]) -> None:
        """Write the values ``payload`` encodes into ``out``."""
        raise NotImplementedError

    def ratio(self) -> float:
        """Encoded bytes per input byte, for a long array."""
        return self.encoded_bytes(1 << 20) / ((1 << 20) * self.dtype.itemsize)


class BFloat16(Codec):
    """float32 values as their top 16 bits, rounded to nearest even."""

    name = "bf16"

    def encoded_bytes(self, count: int) -> int:
        return 2 * count

    def encode(self, values: NDArray[Any], out: NDArray[np.uint8]) -> None:
        bits = values.view(np.uint32)
        rounded = np.right_shift(bits, 16)
        rounded &= 1  # ties to even: add the kept part's lowest bit
        rounded += 0x7FFF
        rounded += bits
        rounded >>= 16
        top = out.view(np.uint16)
        top[:] = rounded
        # Past bfloat16's largest (rounding would carry into the exponent's top), or
        # infinite, or NaN (whose rounding may carry anywhere): a few, fixed one by one.
        np.bitwise_and(bits, 0x7FFFFFFF, out=rounded)
        special = np.flatnonzero(rounded > _ROUNDS_PAST_MAX)
        if special.size:
            self._special(bits[special], top, special)

    @staticmethod
    def _special(bits: NDArray[np.uint32], top: NDArray[np.uint16],
                 where: NDArray[np.intp]) -> None:
        """Encode ``bits``, each past bfloat16's largest, infinite or NaN, at ``where``."""
        magnitude = bits & np.uint32(0x7FFFFFFF)
        sign = (bits >> 16).astype(np.uint16) & np.uint16(0x8000)
        # A finite value: the largest finite one; infinity as it is; a NaN keeps its
        # top bits, quieted.
        code = np.where(magnitude < 0x7F800000, sign | _BF16_MAX, (bits >> 16).astype(np.uint16))
        nan = magnitude > 0x7F800000
        code[nan] |= np.uint16(0x0040)
        top[where] = code

    def decode(self, payload: NDArray[np.uint8], out: NDArray[Any]) -> None:
        wide = out.view(np.uint32)
        wide[:] = payload.view(np.uint16)
        wide <<= 16


class Int8(Codec):
    """Blocks of ``block`` values as one scale and a byte a value."""

    name = "int8"

    def __init__(self, dtype: np.dtype[Any], block: int = DEFAULT_BLOCK) -> None:
        super().__init__(dtype)
        self.block = block
        self._tiny = np.finfo(dtype).tiny

    def encoded_bytes(self, count: int) -> int:
        return self._blocks(count) * self.dtype.itemsize + count

    def _blocks(self, count: int) -> int:
        return -(-count // self.block)

    def _parts(self, buffer: NDArray[np.uint8],
               count: int) -> tuple[NDArray[Any], NDArray[np.int8]]:
        """The scales and the codes of ``count`` values' encoding in ``buffer``."""
        head = self._blocks(count) * self.dtype.itemsize
        return buffer[:head].view(self.dtype), buffer[head:].view(np.int8)

    def _by_block(self, array: NDArray[Any]) -> tuple[NDArray[Any], NDArray[Any]]:
        """``array``'s whole blocks, one a row, and the values after them."""
        whole = array.size // self.block * self.block
        return array[:whole].reshape(-1, self.block), array[whole:]

    def encode(self, values: NDArray[Any], out: NDArray[np.uint8]) -> None:
        scales, codes = self._parts(out, values.size)
        magnitude = np.abs(values)
        rows, tail = self._by_block(magnitude)
        np.max(rows, axis=1, out=scales[:len(rows)])
        if tail.size:
            scales[-1] = tail.max()
        # A block's largest is NaN or infinite where it holds one (max passes both on):
        # its scale comes from its finite values, and its specials get their own codes.
        special = np.flatnonzero(~np.isfinite(scales))
        for index in special:
            part = magnitude[index * self.block:(index + 1) * self.block]
            scales[index] = part[np.isfinite(part)].max(initial=0)
        scales /= _LARGEST
        np.maximum(scales, self._tiny, out=scales)
        # Times the inverse: within half a step plus a rounding (|x| / s <= 126.0...).
        inverse = 1 / scales
        rows, tail = self._by_block(values)
        scaled_rows, scaled_tail = self._by_block(magnitude)  # its room, reused
        np.multiply(rows, inverse[:len(rows), None], out=scaled_rows)
        if tail.size:
            np.multiply(tail, inverse[-1], out=scaled_tail)
        np.rint(magnitude, out=magnitude)
        if not special.size:
            codes[:] = magnitude
            return
        with np.errstate(invalid="ignore"):
            codes[:] = np.nan_to_num(magnitude, nan=0, posinf=0, neginf=0)
        codes[np.isnan(values)] = _NAN
        codes[values == np.inf] = _PLUS_INF
        codes[values == -np.inf] = _MINUS_INF

    def decode(self, payload: NDArray[np.uint8], out: NDArray[Any]) -> None:
        scales, codes = self._parts(payload, out.size)
        code_rows, code_tail = self._by_block(codes)
        rows, tail = self._by_block(out)
        np.multiply(code_rows, scales[:len(rows), None], out=rows)
        if tail.size:
            np.multiply(code_tail, scales[-1], out=tail)
        special = codes < -_LARGEST
        special |= codes > _LARGEST
        if special.any():
            out[codes == _NAN] = np.nan
            out[codes == _PLUS_INF] = np.inf
            out[codes == _MINUS_INF] = -np.inf

class Compression:
    """An all_reduce's compression with a block size of its own, or error feedback.

    Pass one as all_reduce's ``compression``. With ``error_feedback``, each rank
    keeps what its encodings dropped (its residual) and adds it to its array at
    the next call made with this object, as PowerSGD and 1-bit Adam do: errors
    then do not build up over steps. Use one object per stream of arrays (one
    per tensor or bucket reduced each step); its residual starts again at zero
    when an array's size or dtype differs from the last one's.

    Raises:
        ConfigurationError: a mode that is not one of MODES, or an int8 block
            that is no power of two from 1 to MAX_BLOCK.
    """

    def __init__(self, mode: str, *, block: int = DEFAULT_BLOCK,
                 error_feedback: bool = False) -> None:
        codec(mode, np.dtype(np.float32), block)  # checks mode and block
        self.mode, self.block, self.error_feedback = mode, block, error_feedback
        self._residual: NDArray[Any] | None = None

    def residual(self, like: NDArray[Any]) -> NDArray[Any] | None:
        """This rank's residual for ``like``: zeros at first, or after a change of size or
        dtype; None without error feedback."""
        if not self.error_feedback:
            return None
        kept = self._residual
        if kept is None or kept.size != like.size or kept.dtype != like.dtype:
            kept = self._residual = np.zeros(like.size, like.dtype)
        return kept

    def __repr__(self) -> str:
        return (f"Compression({self.mode!r}, block={self.block}, "
                f"error_feedback={self.error_feedback})")


def codec(mode: str, dtype: np.dtype[Any], block: int = DEFAULT_BLOCK) -> Codec:
    """The codec of ``mode`` for arrays of ``dtype``.

    Raises:
        ConfigurationError: no such mode, a block under 1, or a dtype the
            mode cannot hold within its bound.
    """
    dtype = np.dtype(dtype)
    if mode not in MODES:
        raise ConfigurationError(
            f"compression {mode!r} is not one of {', '.join(MODES)}; pass one of them, "
            "or None for the exact all_reduce.")
    if mode == "bf16":
        if dtype != np.float32:
            raise ConfigurationError(
                f"bf16 compression takes float32 arrays, not {dtype}: bfloat16 has "
                "float32's range, not float64's. Use int8 compression, or none.")
        return BFloat16(dtype)
    if dtype not in (np.float32, np.float64):
        raise ConfigurationError(
            f"int8 compression takes float32 or float64 arrays, not {dtype}: integers "
            "and half floats have no room for its error. Use no compression.")
    if not isinstance(block, int) or block < 1 or block > MAX_BLOCK or block & (block - 1):
        raise ConfigurationError(f"an int8 block of {block!r} values is not a power of two "
                                 f"from 1 to {MAX_BLOCK}; pass e.g. 256.")
    return Int8(dtype, block)


def compression_of(compression: object, op: ReduceOp,
                   dtype: np.dtype[Any]) -> tuple[str, int] | None:
    """What an all_reduce's ``compression`` argument asks for, as (mode, block), checked
    against its ``op`` and ``dtype``; None for none.

    Raises:
        ConfigurationError: an unknown mode, an op other than SUM and AVG, or a
            dtype the mode cannot hold within its bound.
    """
    if compression is None:
        return None
    if isinstance(compression, Compression):
        mode, block = compression.mode, compression.block
    elif isinstance(compression, str):
        mode, block = compression, DEFAULT_BLOCK
    else:
        raise ConfigurationError(f"compression={compression!r} is neither a mode's name nor "
                                 f"a Compression; pass one of {', '.join(MODES)}, or None.")
    if op not in (ReduceOp.SUM, ReduceOp.AVG):
        raise ConfigurationError(
            f"compression {mode!r} holds its bound for SUM and AVG only, not "
            f"{op.name}: run this all_reduce without compression.")
    codec(mode, dtype, block)
    return mode, block


def fed_back(compression: object,
             flat: NDArray[Any]) -> tuple[NDArray[Any], NDArray[Any] | None]:
    """A compressed all_reduce's arrays: ``flat``, with the residual of ``compression``
    (a Compression with error feedback) added to it, and that residual, which the
    call overwrites; (flat, None) without error feedback."""
    residual = compression.residual(flat) if isinstance(compression, Compression) else None
    if residual is not None:
        with np.errstate(over="ignore", invalid="ignore"):
            flat += residual
    return flat, residual


def wire_code(mode: str, block: int) -> int:
    """A small number for (mode, block), the same on every member: bf16 1, int8 with
    blocks of 2**k values 2 + k."""
    return 1 if mode == "bf16" else 2 + block.bit_length() - 1


def relative_step(mode: str, dtype: np.dtype[Any]) -> float:
    """``r``, the most one encoding and one addition add, relative to what they encode."""
    rounding = 2 * float(np.finfo(dtype).eps)  # the addition's and the decoding's, with room
    return (2.0 ** -8 if mode == "bf16" else 1.0 / (2 * _LARGEST)) + rounding


def error_bound(mode: str, dtype: np.dtype[Any], members: int,
                magnitude: NDArray[Any]) -> NDArray[np.float64]:
    """The most a compressed SUM over ``members`` can differ from the exact sum.

    ``magnitude``: per element, the sum over members of |x| (bf16) or of the
    largest finite |x| in the element's int8 block (int8).
    """
    growth = math.expm1(members * math.log1p(relative_step(mode, dtype)))
    floor = members * float(np.finfo(dtype).tiny) if mode == "int8" else 0.0
    bound: NDArray[np.float64] = growth * np.asarray(magnitude, dtype=np.float64) + floor
    return bound
