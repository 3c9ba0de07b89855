"""The examples' arrays: numpy's, or torch's with `--torch`, printed as torch prints them.

Each example runs on numpy arrays by default, and on torch tensors, as the
torch.distributed program it comes from writes it, when given `--torch`; both
print the same lines.
"""

import sys

import numpy as np

#: Whether this run uses torch tensors (the program was given --torch).
TORCH = "--torch" in sys.argv[1:]


def tensor(values: list[float]):
    """A float32 tensor of `values`: torch's with --torch, else a numpy array."""
    if TORCH:
        import torch
        return torch.tensor(values, dtype=torch.float32)
    return np.array(values, dtype=np.float32)


def tensor_str(t) -> str:
    """`t` as print() shows a float32 torch tensor: `tensor([1., 2.])`."""
    if TORCH:
        return str(t)
    # torch drops the decimals of whole numbers and shows four of anything else.
    whole = bool(np.all(t == np.round(t)))
    body = np.array2string(t, separator=", ", precision=4,
                           floatmode="maxprec" if whole else "fixed")
    return f"tensor({body})"
