"""A :class:`~kvmm.sim.SimConfig` as JSON and back: ``config_to_json(cfg) -> dict``,
``config_from_json(dict) -> SimConfig``, exact (``config_from_json(config_to_json(c)) == c``).

What ``kvmm simulate --config FILE`` replays and ``kvmm plan`` writes (``config.json``).  Every
field of the config is written; on reading, a missing field keeps its default (a hand-written
file names only what it changes) and an unknown one is a one-line :class:`BadInputError`.

* a tier spec, model, fabric or link equal to a preset is written as the preset's name (plus
  the capacity for a tier); any other is written field by field (a ``ModelArch`` as
  ``{"arch": {fields}}``, a ``Hardware`` field by field);
* the latency model is its name, or a built-in object's parameters: ``{"fitted": {"alpha",
  "beta"}}``, ``{"constant": {rates}}``, ``{"roofline": {arch, hardware, tp, dtypes, MFUs, ...}}``;
* a workload is ``{"trace": name-or-path}``, ``{"path": path}`` (an ``os.PathLike``),
  ``{"generated": {Workload fields}}`` or ``{"inline": {the trace's arrays}}`` (a loaded
  :class:`~kvmm.traces.KVTrace`);
* policies, routers and scorers must be given by registered name: an object has no JSON form
  (the error names the field).
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import MISSING, fields
from pathlib import Path
from typing import Any

import numpy as np

from kvmm._validate import as_index_array, short_repr, strict_json
from kvmm.cluster.event_stream import EventStream
from kvmm.cluster.fabric import FABRIC_PRESETS, FabricSpec
from kvmm.errors import BadInputError
from kvmm.sim.cluster_config import ClusterConfig, PooledStore
from kvmm.sim.config import PDConfig, SimConfig
from kvmm.sim.cost import Prices
from kvmm.sim.latency.accelerators import Hardware
from kvmm.sim.latency.arch import ModelArch
from kvmm.sim.latency.fitted import Fitted
from kvmm.sim.latency.roofline import Roofline
from kvmm.sim.latency.step import ConstantRate
from kvmm.sim.levels import TierLevel
from kvmm.sim.models import MODELS, ModelSpec
from kvmm.sim.workload import Workload
from kvmm.tiers.spec import LINK_PRESETS, PRESETS, TierSpec, preset
from kvmm.traces.trace import KVTrace

__all__ = ["config_to_json", "config_from_json", "save_config", "load_config", "FORMAT", "VERSION"]

FORMAT = "kvmm.sim.SimConfig"
VERSION = 1
_TRACE_ARRAYS = ("timestamp_ms", "input_length", "output_length", "block_offsets", "block_ids")
#: the largest config file read (an inline trace of some million requests fits)
MAX_CONFIG_BYTES = 1 << 30


def config_to_json(cfg) -> dict:
    """The config as a JSON-ready dict (``json.dumps`` writes it).  Runtime complexity: O(size of
    the config; an inline trace's arrays)."""
    if not isinstance(cfg, SimConfig):
        raise BadInputError(f"config_to_json takes a SimConfig, got {type(cfg).__name__}")
    out: dict[str, Any] = {"format": FORMAT, "version": VERSION}
    for f in fields(SimConfig):
        value = getattr(cfg, f.name)
        encode = _ENCODERS.get(f.name)
        out[f.name] = encode(value, f.name) if encode else _scalar(value, f.name)
    return out


def config_from_json(data: dict):
    """The :class:`SimConfig` a :func:`config_to_json` dict (or a hand-written subset) describes.
    Runtime complexity: O(size of the dict)."""
    if not isinstance(data, dict):
        raise BadInputError(f"a SimConfig JSON must be an object, got {type(data).__name__}")
    data = dict(data)
    if data.pop("format", FORMAT) != FORMAT or data.pop("version", VERSION) != VERSION:
        raise BadInputError(f"not a SimConfig JSON of this kvmm; expected format {FORMAT!r} version {VERSION}")
    names = [f.name for f in fields(SimConfig)]
    _check_keys(data, names, "config")
    kwargs = {k: (_DECODERS[k](v, k) if k in _DECODERS else v) for k, v in data.items()}
    return SimConfig(**kwargs)


def save_config(cfg, path) -> Path:
    """Write ``cfg`` to ``path`` as indented JSON; returns the path."""
    path = Path(path)
    path.write_text(json.dumps(config_to_json(cfg), indent=2) + "\n", encoding="utf-8")
    return path


def load_config(path):
    """The SimConfig in the JSON file ``path``; a one-line error naming the file otherwise.

    The file is read by :func:`kvmm._validate.strict_json`: UTF-8, no key twice in one object,
    no ``NaN``, integers of at most 20 digits, at most 32 levels deep, at most 1 GiB.  The values
    are not converted: ``"12"`` is not a number and ``12.0`` is not a count."""
    what = f"--config {str(path)!r}"
    try:
        size = Path(path).stat().st_size
        if size > MAX_CONFIG_BYTES:
            raise BadInputError(f"{what}: {size} bytes; expected a config file of at most {MAX_CONFIG_BYTES} bytes")
        data = strict_json(Path(path).read_bytes(), what)
    except OSError as exc:
        raise BadInputError(f"{what}: cannot read it ({exc.strerror or type(exc).__name__})") from None
    try:
        return config_from_json(data)
    except (BadInputError, TypeError, ValueError) as exc:  # the file's values reach constructors that check them
        raise BadInputError(f"{what}: {exc}") from None


# ---------------------------------------------------------------------- encoders
def _scalar(value: Any, what: str) -> Any:
    if isinstance(value, np.generic):
        value = value.item()
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise BadInputError(f"{what} is a {type(value).__name__}; JSON holds numbers, text, booleans and null only")


def _name_only(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise BadInputError(f"{what} is a {type(value).__name__} object; a SimConfig JSON holds registered names only")
    return value


def _spec(spec, what: str) -> dict:
    if spec.name in PRESETS and PRESETS[spec.name].with_capacity(spec.capacity_bytes) == spec:
        return {"preset": spec.name, "capacity_bytes": spec.capacity_bytes}
    return {f.name: _scalar(getattr(spec, f.name), f"{what}.{f.name}") for f in fields(spec)}


def _named(value, presets: dict, what: str) -> Any:
    """A preset's name when ``value`` equals it, else the dataclass field by field."""
    if value.name in presets and presets[value.name] == value:
        return value.name
    return {f.name: _scalar(getattr(value, f.name), f"{what}.{f.name}") for f in fields(value)}


def _level(level, what: str) -> dict:
    return {"spec": _spec(level.spec, f"{what}.spec"), "eviction": _name_only(level.eviction, f"{what}.eviction"),
            "admission": _name_only(level.admission, f"{what}.admission"), "fill": level.fill,
            "inclusive": level.inclusive}


def _levels(levels, what: str) -> list:
    return [_level(lv, f"{what}[{i}]") for i, lv in enumerate(levels)]


def _workload(value, what: str) -> dict:
    if isinstance(value, str):
        return {"trace": value}
    if isinstance(value, Workload):
        return {"generated": {f.name: getattr(value, f.name) for f in fields(value)}}
    if isinstance(value, KVTrace):
        inline = {k: getattr(value, k).tolist() for k in _TRACE_ARRAYS}
        inline.update(name=value.name, bad_lines=value.bad_lines, block_tokens=value.block_tokens,
                      source_format=value.source_format,
                      columns={k: {"dtype": str(v.dtype), "values": v.tolist()} for k, v in value.columns.items()})
        return {"inline": inline}
    return {"path": os.fspath(value)}


def _model(value, what: str) -> Any:
    if isinstance(value, str):
        return value
    if isinstance(value, ModelArch):
        return {"arch": _arch(value, what)}
    return _named(value, MODELS, what)


def _arch(arch, what: str) -> dict:
    return {f.name: (list(getattr(arch, f.name)) if isinstance(getattr(arch, f.name), tuple)
                     else _scalar(getattr(arch, f.name), f"{what}.{f.name}")) for f in fields(arch)}


def _hardware(value, what: str) -> Any:
    if isinstance(value, str):
        return value
    out = {}
    for f in fields(value):
        v = getattr(value, f.name)
        if f.name == "sources":
            v = {str(k): str(x) for k, x in v.items()}
        elif f.name in ("assumed", "aliases"):
            v = sorted(v) if f.name == "assumed" else list(v)
        else:
            v = _scalar(v, f"{what}.{f.name}")
        out[f.name] = v
    return out


def _latency(value, what: str) -> Any:
    """A latency model: its name, or the built-in object's parameters (a user's own object has
    no JSON form)."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, Fitted):
        return {"fitted": {"alpha": value.alpha, "beta": value.beta_by_name}}
    if isinstance(value, ConstantRate):
        return {"constant": {k: getattr(value, k) for k in ConstantRate.__slots__}}
    if isinstance(value, Roofline):
        params = {k: getattr(value, k) for k in Roofline.__slots__ if not k.startswith("_")}
        params["arch"] = {"arch": _arch(value.arch, f"{what}.arch")}
        params["hardware"] = _hardware(value.hardware, f"{what}.hardware")
        return {"roofline": params}
    raise BadInputError(f"{what} is a {type(value).__name__} object; a SimConfig JSON holds the names roofline, "
                        "constant, fitted or a Roofline / ConstantRate / Fitted object")


def _pd(value, what: str) -> Any:
    if value is None:
        return None
    return {"prefill_instances": value.prefill_instances, "decode_instances": value.decode_instances,
            "link": _named(value.link, LINK_PRESETS, f"{what}.link"), "layerwise_overlap": value.layerwise_overlap}


def _cluster(value, what: str) -> Any:
    if value is None:
        return None
    return {"instances": value.instances, "router": _name_only(value.router, f"{what}.router"),
            "router_params": {k: _scalar(v, f"{what}.router_params[{k!r}]") for k, v in value.router_params},
            "shared_tiers": _levels(value.shared_tiers, f"{what}.shared_tiers"),
            "fabric": None if value.fabric is None else _named(value.fabric, FABRIC_PRESETS, f"{what}.fabric"),
            "index": value.index, "index_max_entries": value.index_max_entries,
            "index_max_holders": value.index_max_holders,
            "events": None if value.events is None else dataclasses.asdict(value.events),
            "store": [None if s is None else dataclasses.asdict(s) for s in value.store],
            "metrics_interval_s": value.metrics_interval_s}


def _prices(value, what: str) -> Any:
    if value is None:
        return None
    return {"gpu_usd_per_hour": value.gpu_usd_per_hour, "tier_usd_per_gib_hour": dict(value.tier_usd_per_gib_hour),
            "tier_usd_per_hour": dict(value.tier_usd_per_hour)}


_ENCODERS = {"workload": _workload, "model": _model, "tiers": _levels, "fast_tier": _spec, "pd": _pd,
             "scorer": _name_only, "cluster": _cluster, "prices": _prices, "hardware": _hardware, "latency": _latency,
             "latency_table": lambda v, w: None if v is None else os.fspath(v)}


# ---------------------------------------------------------------------- decoders
def _checked_object(data: Any, what: str) -> dict:
    """``data`` if it is a JSON object (a dict); a BadInputError naming ``what`` otherwise."""
    if not isinstance(data, dict):
        raise BadInputError(f"{what} must be a JSON object, got {type(data).__name__}")
    return data


def _check_keys(data: Any, allowed, what: str) -> None:
    unknown = sorted(set(_checked_object(data, what)) - set(allowed))
    if unknown:
        raise BadInputError(f"{what}: unknown key {unknown[0]!r}; expected some of {sorted(allowed)}")


def _spec_from(data: Any, what: str):
    if isinstance(data, dict) and "preset" in data:
        _check_keys(data, ("preset", "capacity_bytes"), what)
        capacity = data.get("capacity_bytes")
        if capacity is not None and (isinstance(capacity, bool) or not isinstance(capacity, int)):
            raise BadInputError(f"{what}.capacity_bytes must be an integer number of bytes or null, got "
                                f"{short_repr(capacity)}")
        return preset(data["preset"], capacity)
    return _fields_from(_checked_object(data, what), TierSpec, what)


def _named_from(data: Any, presets: dict, cls, what: str):
    if isinstance(data, str):
        if data not in presets:
            raise BadInputError(f"{what}: unknown preset {data!r}; expected one of {sorted(presets)} or an object")
        return presets[data]
    return _fields_from(data, cls, what)


def _level_from(data: Any, what: str):
    _check_keys(data, ("spec", "eviction", "admission", "fill", "inclusive"), what)
    data = dict(data)
    spec = _spec_from(data.pop("spec", {"preset": "nvme"}), f"{what}.spec")
    return TierLevel(spec, **data)


def _levels_from(data: Any, what: str) -> tuple:
    if not isinstance(data, list):
        raise BadInputError(f"{what} must be a JSON list of tier levels, got {type(data).__name__}")
    return tuple(_level_from(d, f"{what}[{i}]") for i, d in enumerate(data))


def _workload_from(data: Any, what: str):
    _check_keys(data, ("trace", "path", "generated", "inline"), what)
    if len(data) != 1:
        raise BadInputError(f"{what}: expected exactly one of trace, path, generated, inline")
    (kind, value), = data.items()
    if kind == "trace":
        return value
    if kind == "path":
        return Path(value)
    if kind == "generated":
        _check_keys(value, [f.name for f in fields(Workload)], f"{what}.generated")
        return Workload(**value)
    inline = f"{what}.inline"
    _check_keys(value, (*_TRACE_ARRAYS, "columns", "name", "bad_lines", "block_tokens", "source_format"), inline)
    missing = [k for k in (*_TRACE_ARRAYS, "name") if k not in value]
    if missing:
        raise BadInputError(f"{inline}: missing {missing}; an inline trace names its arrays {list(_TRACE_ARRAYS)} "
                            "and its name")
    value = dict(value)
    columns = value.pop("columns", {})
    columns = {k: _column_from(c, f"{inline}.columns[{k!r}]")
               for k, c in _checked_object(columns, f"{inline}.columns").items()}
    arrays = {k: _int_list(value.pop(k), f"{inline}.{k}") for k in _TRACE_ARRAYS}
    return KVTrace(columns=columns, **arrays, **value)


def _int_list(values: Any, what: str) -> np.ndarray:
    """A JSON list of integers as int64: text, floats and booleans are refused, not converted."""
    if not isinstance(values, list):
        raise BadInputError(f"{what} must be a JSON list of integers, got {type(values).__name__}")
    return as_index_array(values, what)


def _column_from(data: Any, what: str) -> np.ndarray:
    """``{"dtype": ..., "values": [...]}`` as that array: the values' own kind must be the dtype's."""
    _check_keys(data, ("dtype", "values"), what)
    if not isinstance(data.get("dtype"), str) or not isinstance(data.get("values"), list):
        raise BadInputError(f"{what} must be {{\"dtype\": name, \"values\": list}}")
    try:
        dtype = np.dtype(data["dtype"])
    except TypeError:
        raise BadInputError(f"{what}: unknown dtype {data['dtype']!r}") from None
    if dtype.kind in "iu":
        return as_index_array(data["values"], what, dtype=dtype.type)
    values = np.asarray(data["values"]) if data["values"] else np.zeros(0, dtype)
    readable = {"f": "iuf", "b": "b", "U": "U", "S": "U"}.get(dtype.kind, "")
    if values.ndim != 1 or values.dtype.kind not in readable:
        raise BadInputError(f"{what}: values of kind {values.dtype} cannot be read as {dtype} (text is not a number)")
    return values.astype(dtype)


def _model_from(data: Any, what: str):
    if isinstance(data, dict) and "arch" in data:
        _check_keys(data, ("arch",), what)
        return _arch_from(data["arch"], f"{what}.arch")
    return data if isinstance(data, str) else _named_from(data, MODELS, ModelSpec, what)


def _arch_from(data: Any, what: str):
    if not isinstance(data, dict):
        raise BadInputError(f"{what} must be an object of ModelArch fields, got {type(data).__name__}")
    _check_keys(data, [f.name for f in fields(ModelArch)], what)
    data = dict(data)
    if isinstance(data.get("moe_layer_indices"), list):
        data["moe_layer_indices"] = tuple(data["moe_layer_indices"])
    return ModelArch(**data)


def _hardware_from(data: Any, what: str):
    if isinstance(data, str):
        return data
    if not isinstance(data, dict):
        raise BadInputError(f"{what} must be a hardware name or an object of Hardware fields, got {type(data).__name__}")
    _check_keys(data, [f.name for f in fields(Hardware)], what)
    data = dict(data)
    if "assumed" in data:
        data["assumed"] = frozenset(data["assumed"])
    if "aliases" in data:
        data["aliases"] = tuple(data["aliases"])
    return Hardware(**data)


def _latency_from(data: Any, what: str):
    if data is None or isinstance(data, str):
        return data
    if not isinstance(data, dict) or len(data) != 1 or next(iter(data)) not in ("fitted", "constant", "roofline"):
        raise BadInputError(f"{what} must be a name (roofline, constant, fitted) or one of {{\"fitted\": ...}}, "
                            "{\"constant\": ...}, {\"roofline\": ...}")
    (kind, params), = data.items()
    if not isinstance(params, dict):
        raise BadInputError(f"{what}.{kind} must be an object of parameters, got {type(params).__name__}")
    if kind == "fitted":
        _check_keys(params, ("alpha", "beta"), f"{what}.fitted")
        return Fitted(**params)
    if kind == "constant":
        _check_keys(params, ConstantRate.__slots__, f"{what}.constant")
        return ConstantRate(**params)
    _check_keys(params, [k for k in Roofline.__slots__ if not k.startswith("_")], f"{what}.roofline")
    params = dict(params)
    params["arch"] = _model_from(params.get("arch"), f"{what}.roofline.arch")
    params["hardware"] = _hardware_from(params.get("hardware"), f"{what}.roofline.hardware")
    return Roofline(**params)


def _pd_from(data: Any, what: str):
    return _fields_from(data, PDConfig, what, link=lambda d, w: _named_from(d, LINK_PRESETS, TierSpec, w))


def _cluster_from(data: Any, what: str):
    def stores(d, w):
        if not isinstance(d, list):
            raise BadInputError(f"{w}: expected a list with a PooledStore's fields (or null) per shared level")
        return tuple(_fields_from(x, PooledStore, f"{w}[{k}]") for k, x in enumerate(d))

    return _fields_from(data, ClusterConfig, what, shared_tiers=_levels_from,
                        fabric=lambda d, w: _named_from(d, FABRIC_PRESETS, FabricSpec, w),
                        events=lambda d, w: _fields_from(d, EventStream, w), store=stores)


def _prices_from(data: Any, what: str):
    return _fields_from(data, Prices, what)


def _fields_from(data: Any, cls, what: str, **nested):
    """``cls(**data)`` for an optional dataclass field (null -> None), after checking the keys
    and decoding the ``nested`` fields present (name -> decoder(value, what))."""
    if data is None:
        return None
    _check_keys(data, [f.name for f in fields(cls)], what)
    missing = [f.name for f in fields(cls) if f.init and f.default is MISSING and f.default_factory is MISSING
               and f.name not in data]
    if missing:
        raise BadInputError(f"{what}: missing {missing}")
    data = dict(data)
    for name, decode in nested.items():
        if data.get(name) is not None:
            data[name] = decode(data[name], f"{what}.{name}")
    return cls(**data)


_DECODERS = {"workload": _workload_from, "model": _model_from, "tiers": _levels_from, "fast_tier": _spec_from,
             "pd": _pd_from, "cluster": _cluster_from, "prices": _prices_from, "hardware": _hardware_from,
             "latency": _latency_from, "latency_table": lambda d, w: d}
