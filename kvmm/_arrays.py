"""Small array helpers shared by kvmm's structure-of-arrays classes."""

from __future__ import annotations

import numpy as np


def grown(arr: np.ndarray, size: int, fill=0) -> np.ndarray:
    """A new 1-d array of ``size`` elements (``>= len(arr)``): ``arr``'s values, then ``fill``."""
    out = np.full(size, fill, dtype=arr.dtype)
    out[:arr.shape[0]] = arr
    return out
