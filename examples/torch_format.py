"""Printing numpy arrays the way print() shows a float32 torch tensor.

The numpy forms of the examples use this so that they print exactly the
lines of their torch forms.
"""

import numpy as np


def tensor_str(t: np.ndarray) -> str:
    """``t`` as print() shows a float32 torch tensor of the same values: ``tensor([1., 2.])``."""
    # torch drops the decimals of whole numbers and shows four of anything else.
    whole = bool(np.all(t == np.round(t)))
    body = np.array2string(t, separator=", ", precision=4,
                           floatmode="maxprec" if whole else "fixed")
    return f"tensor({body})"
