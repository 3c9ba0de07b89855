"""as_buffer: in place where contiguous, copy + write-back where not, refusals otherwise."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from asyncoll._group.tensors import Buffer, as_buffer
from asyncoll.errors import ConfigurationError

pytestmark = pytest.mark.timeout(60)


def _torch() -> Any:
    return pytest.importorskip("torch")


# -- numpy --------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(0,), (1,), (5,), (2, 3), (2, 3, 4), ()])
def test_contiguous_array_is_used_in_place(shape: tuple[int, ...]) -> None:
    array = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)

    buffer = as_buffer(array, "all_reduce")

    assert buffer.original is None
    assert buffer.flat.ndim == 1
    assert buffer.flat.size == array.size
    assert buffer.flat.flags.c_contiguous
    assert array.size == 0 or np.shares_memory(buffer.flat, array)
    buffer.flat[...] = 7
    buffer.write_back()  # nothing to copy, but harmless
    assert (array == 7).all()


@pytest.mark.parametrize("make", [
    lambda: np.arange(12, dtype=np.int64).reshape(3, 4).T,
    lambda: np.arange(20, dtype=np.float64)[::3],
    lambda: np.arange(20, dtype=np.float64)[::-2],
    lambda: np.arange(60, dtype=np.int32).reshape(3, 4, 5)[:, 1:3, ::2],
    lambda: np.asfortranarray(np.arange(6, dtype=np.complex64).reshape(2, 3)),
], ids=["transposed", "step-3", "reversed-step-2", "3d-sliced", "fortran"])
def test_non_contiguous_array_is_copied_and_the_result_written_back(make: Any) -> None:
    array = make()
    before = array.copy()

    buffer = as_buffer(array, "all_reduce")

    assert buffer.original is array
    assert buffer.flat.ndim == 1 and buffer.flat.flags.c_contiguous
    assert not np.shares_memory(buffer.flat, array)
    np.testing.assert_array_equal(buffer.flat, before.reshape(-1))  # C order, as torch's
    buffer.flat[...] = buffer.flat * 2 + 1
    np.testing.assert_array_equal(array, before)  # untouched until write_back
    buffer.write_back()
    np.testing.assert_array_equal(array, before * 2 + 1)


def test_write_back_lands_in_the_base_arrays_elements_only() -> None:
    base = np.zeros((4, 4), dtype=np.int16)
    view = base[::2, 1::2]

    buffer = as_buffer(view, "broadcast")
    buffer.flat[...] = [1, 2, 3, 4]
    buffer.write_back()

    expected = np.zeros((4, 4), dtype=np.int16)
    expected[::2, 1::2] = [[1, 2], [3, 4]]
    np.testing.assert_array_equal(base, expected)


def test_read_only_array_is_refused_naming_the_operation() -> None:
    array = np.arange(4, dtype=np.float32)
    array.setflags(write=False)

    with pytest.raises(ConfigurationError, match="read-only") as info:
        as_buffer(array, "all_reduce")

    assert "all_reduce" in str(info.value)


def test_read_only_non_contiguous_array_is_refused() -> None:
    array = np.arange(8, dtype=np.float32)
    array.setflags(write=False)

    with pytest.raises(ConfigurationError, match="read-only"):
        as_buffer(array[::2], "all_reduce")


@pytest.mark.parametrize("shape, strides", [((4,), (0,)), ((2, 3), (8, 0)), ((3, 2), (0, 8)),
                                            ((3, 3), (8, 8))],
                         ids=["broadcast-1d", "broadcast-rows", "broadcast-cols",
                              "diagonal-overlap"])
def test_array_whose_elements_share_memory_is_refused(shape: tuple[int, ...],
                                                      strides: tuple[int, ...]) -> None:
    base = np.zeros(16, dtype=np.float64)
    array = np.lib.stride_tricks.as_strided(base, shape=shape, strides=strides,
                                            writeable=True)

    with pytest.raises(ConfigurationError, match="share memory") as info:
        as_buffer(array, "all_reduce")

    assert str(array.strides) in str(info.value)


def test_broadcast_to_result_is_refused() -> None:
    array = np.broadcast_to(np.zeros(3), (4, 3))

    with pytest.raises(ConfigurationError):
        as_buffer(array, "all_reduce")


@pytest.mark.parametrize("value", [[1.0, 2.0], (1, 2), 3.0, None, b"abc", memoryview(b"ab")],
                         ids=["list", "tuple", "float", "none", "bytes", "memoryview"])
def test_non_array_input_is_refused_naming_its_type(value: object) -> None:
    with pytest.raises(ConfigurationError, match="numpy array or a CPU torch tensor") as info:
        as_buffer(value, "all_reduce")

    assert type(value).__name__ in str(info.value)


@pytest.mark.parametrize("dtype", [object, "U4", "datetime64[ns]",
                                   ">i4" if np.little_endian else "<i4"])
def test_unsupported_dtype_is_refused(dtype: object) -> None:
    array = np.zeros(3, dtype=dtype)  # type: ignore[call-overload]

    with pytest.raises(ConfigurationError, match="not supported") as info:
        as_buffer(array, "all_reduce")

    assert str(array.dtype) in str(info.value)


def test_buffer_without_original_does_not_write_back() -> None:
    flat = np.arange(3)

    Buffer(flat).write_back()

    np.testing.assert_array_equal(flat, [0, 1, 2])


# -- torch -----------------------------------------------------------------------------


def test_contiguous_torch_tensor_shares_its_storage() -> None:
    torch = _torch()
    tensor = torch.arange(6, dtype=torch.float32).reshape(2, 3)

    buffer = as_buffer(tensor, "all_reduce")

    assert buffer.original is None
    assert buffer.flat.dtype == np.float32
    buffer.flat[...] = 5
    assert torch.equal(tensor, torch.full((2, 3), 5.0))


def test_non_contiguous_torch_tensor_gets_the_result_written_back() -> None:
    torch = _torch()
    tensor = torch.arange(12, dtype=torch.int64).reshape(3, 4).t()
    assert not tensor.is_contiguous()
    before = tensor.clone()

    buffer = as_buffer(tensor, "all_reduce")

    assert buffer.original is not None
    np.testing.assert_array_equal(buffer.flat, before.reshape(-1).numpy())
    buffer.flat[...] = buffer.flat * 10
    buffer.write_back()
    assert torch.equal(tensor, before * 10)


def test_sliced_torch_tensor_gets_the_result_written_back_into_its_base() -> None:
    torch = _torch()
    base = torch.zeros(10, dtype=torch.float64)
    view = base[1::3]

    buffer = as_buffer(view, "all_reduce")
    buffer.flat[...] = [1, 2, 3]
    buffer.write_back()

    assert base.tolist() == [0, 1, 0, 0, 2, 0, 0, 3, 0, 0]


def test_bfloat16_tensor_is_refused() -> None:
    torch = _torch()

    with pytest.raises(ConfigurationError, match="bfloat16"):
        as_buffer(torch.zeros(3, dtype=torch.bfloat16), "all_reduce")


def test_requires_grad_leaf_tensor_is_accepted_and_shares_storage() -> None:
    torch = _torch()
    tensor = torch.zeros(4, requires_grad=True)

    buffer = as_buffer(tensor, "all_reduce")
    buffer.flat[...] = 2

    assert tensor.requires_grad
    assert tensor.detach().tolist() == [2.0] * 4


def test_expanded_torch_tensor_is_refused() -> None:
    torch = _torch()

    with pytest.raises(ConfigurationError, match="share memory"):
        as_buffer(torch.zeros(1, 3).expand(4, 3), "all_reduce")


def test_conjugate_view_tensor_is_refused() -> None:
    torch = _torch()
    tensor = torch.zeros(3, dtype=torch.complex64).conj()
    assert tensor.is_conj()

    with pytest.raises(ConfigurationError, match="conjugate"):
        as_buffer(tensor, "all_reduce")


def test_sparse_torch_tensor_is_refused() -> None:
    torch = _torch()

    with pytest.raises(ConfigurationError, match="dense"):
        as_buffer(torch.zeros(3).to_sparse(), "all_reduce")
