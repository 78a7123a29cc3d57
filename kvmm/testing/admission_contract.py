"""The contract every :class:`~kvmm.protocols.AdmissionPolicy` passes.

::

    class TestMyAdmission(AdmissionPolicyContract):
        def make_policy(self):
            return MyAdmission(threshold=2)
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from kvmm.errors import DTypeError, ShapeError
from kvmm.policies import AdmissionRequest
from kvmm.protocols import AdmissionPolicy

__all__ = ["AdmissionPolicyContract", "admission_requests", "as_admit_mask"]


class AdmissionPolicyContract:
    """Contract suite for an admission policy; subclass it and define ``make_policy()``.

    Requests are :class:`~kvmm.policies.AdmissionRequest` objects (``keys`` int64 block keys
    in prefix order, ``cached`` and ``gpu_hit`` masks) drawn from a small key universe so keys
    repeat.  It checks:

    * it is an :class:`~kvmm.protocols.AdmissionPolicy`;
    * ``admit`` returns a boolean mask over the request's blocks (or an index array of distinct
      in-range blocks) and never admits a block that is already ``cached`` (rewriting it would
      waste the tier's write bandwidth);
    * it is deterministic: a deep copy fed the same requests makes the same decisions;
    * it accepts uint64 keys (the top bit set) and any object with ``keys`` and ``cached``
      (no ``gpu_hit``);
    * a bad request (float keys, a non-boolean or wrongly sized mask, an object without keys)
      raises and leaves the policy's state (its attributes, deep-compared) unchanged; with
      ``raises_kvmm_errors`` the errors must be kvmm's ``DTypeError``/``ShapeError``.
    """

    raises_kvmm_errors = False

    def make_policy(self) -> Any:
        """A fresh policy (override)."""
        raise NotImplementedError("subclass AdmissionPolicyContract and define make_policy()")

    def test_speaks_the_protocol(self) -> None:
        assert isinstance(self.make_policy(), AdmissionPolicy)

    def test_returns_a_mask_that_never_rewrites_cached_blocks(self) -> None:
        policy = self.make_policy()
        for req in admission_requests(0):
            mask = as_admit_mask(policy.admit(req), req.keys.shape[0])
            assert not np.any(mask & req.cached), f"admitted cached blocks {np.flatnonzero(mask & req.cached)}"

    def test_deterministic(self) -> None:
        policy = self.make_policy()
        twin = copy.deepcopy(policy)
        for req in admission_requests(1):
            n = req.keys.shape[0]
            assert np.array_equal(as_admit_mask(policy.admit(req), n), as_admit_mask(twin.admit(req), n))

    def test_accepts_uint64_keys_and_plain_objects(self) -> None:
        class View:
            keys = np.array([2**64 - 1, 3], dtype=np.uint64)
            cached = np.array([False, True])

        mask = as_admit_mask(self.make_policy().admit(View()), 2)
        assert not mask[1]

    @pytest.mark.parametrize("case", ["float keys", "int mask", "short mask", "int gpu_hit", "no keys"])
    def test_bad_requests_raise_and_change_nothing(self, case: str) -> None:
        bad, error = {
            "float keys": (AdmissionRequest(np.array([1.0, 2.0]), np.array([False, False])), DTypeError),
            "int mask": (AdmissionRequest(np.array([1, 2]), np.array([0, 1])), DTypeError),
            "short mask": (AdmissionRequest(np.array([1, 2]), np.array([False])), ShapeError),
            "int gpu_hit": (AdmissionRequest(np.array([1, 2]), np.array([False, True]), np.array([1, 0])), DTypeError),
            "no keys": (object(), DTypeError),
        }[case]
        policy = self.make_policy()
        for req in admission_requests(2, 10):
            policy.admit(req)
        before = _state_of(policy)
        with pytest.raises(error if self.raises_kvmm_errors else Exception):
            policy.admit(bad)
        _same_state(before, _state_of(policy))


def admission_requests(seed: int, n: int = 40) -> Iterator[Any]:
    """``n`` AdmissionRequests of 0-11 blocks over 30 keys, ~40 % cached, ~50 % GPU hits."""
    rng = np.random.default_rng(seed)
    for _ in range(n):
        size = int(rng.integers(0, 12))
        keys = rng.integers(0, 30, size=size).astype(np.int64)
        yield AdmissionRequest(keys, rng.random(size) < 0.4, rng.random(size) < 0.5)


def as_admit_mask(decision: Any, n: int) -> np.ndarray:
    """An ``admit`` result as a boolean mask over ``n`` blocks (asserting the Protocol's forms)."""
    decision = np.asarray(decision)
    if decision.dtype == np.bool_:
        assert decision.shape == (n,), f"admit returned a mask of shape {decision.shape} for {n} blocks"
        return decision
    assert decision.dtype.kind in "iu" and decision.ndim == 1, f"admit returned {decision.dtype} {decision.shape}"
    assert np.unique(decision).size == decision.size, "admit returned repeated block indices"
    assert decision.size == 0 or (decision.min() >= 0 and decision.max() < n), "admit returned out-of-range indices"
    mask = np.zeros(n, dtype=np.bool_)
    mask[decision] = True
    return mask


def _state_of(policy: Any) -> dict:
    return copy.deepcopy(dict(vars(policy))) if hasattr(policy, "__dict__") else {}


def _same_state(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        if hasattr(a[k], "snapshot"):
            sa, sb = a[k].snapshot(), b[k].snapshot()
            assert all(np.array_equal(sa[n], sb[n]) for n in sa), f"{k} changed by a refused request"
        elif hasattr(a[k], "__dict__"):
            _same_state(vars(a[k]), vars(b[k]))
        else:
            assert np.array_equal(a[k], b[k]), f"{k} changed by a refused request"
