"""kvmm.sim.latency: how long a scheduler step takes on a given model and accelerator.

``ModelArch`` (from a Hugging Face config.json or a shipped name), ``Hardware`` presets with
published figures (``HARDWARE``, ``hardware(name)``), the ``LatencyModel`` Protocol and its
built-ins -- ``Roofline`` (physical), ``ConstantRate`` (the simulator's original model),
``Fitted`` (calibrated from measured steps by ``fit_latency``) -- and ``kv_pool_bytes`` (the KV
cache that fits beside the weights).  See docs/latency.md.  Imports are lazy: ``import
kvmm.sim.latency`` compiles nothing and reads no data file.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvmm._lazy import lazy_exports

_LAZY = {
    "ModelArch": "kvmm.sim.latency.arch",
    "DTYPE_BYTES": "kvmm.sim.latency.arch",
    "Hardware": "kvmm.sim.latency.accelerators",
    "HARDWARE": "kvmm.sim.latency.accelerators",
    "hardware": "kvmm.sim.latency.accelerators",
    "kv_pool_bytes": "kvmm.sim.latency.accelerators",
    "LatencyModel": "kvmm.sim.latency.step",
    "FEATURES": "kvmm.sim.latency.step",
    "COEF_LEN": "kvmm.sim.latency.step",
    "step_features": "kvmm.sim.latency.step",
    "ConstantRate": "kvmm.sim.latency.step",
    "Roofline": "kvmm.sim.latency.roofline",
    "Fitted": "kvmm.sim.latency.fitted",
    "FitReport": "kvmm.sim.latency.fitted",
    "fit_latency": "kvmm.sim.latency.fitted",
    "step_split": "kvmm.sim.latency._kernels",
    "decode_stretch": "kvmm.sim.latency._kernels",
    "decode_stretch_seconds": "kvmm.sim.latency._kernels",
}

__all__ = sorted(_LAZY)

if TYPE_CHECKING:  # what editors and type checkers see; at run time each name loads on first use
    from kvmm.sim.latency._kernels import decode_stretch, decode_stretch_seconds, step_split
    from kvmm.sim.latency.accelerators import HARDWARE, Hardware, hardware, kv_pool_bytes
    from kvmm.sim.latency.arch import DTYPE_BYTES, ModelArch
    from kvmm.sim.latency.fitted import FitReport, Fitted, fit_latency
    from kvmm.sim.latency.roofline import Roofline
    from kvmm.sim.latency.step import COEF_LEN, FEATURES, ConstantRate, LatencyModel, step_features

__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
