"""Issue 33, item 6: ``kvmm simulate --config`` / ``load_config`` on hostile JSON.  Every case is
one line on stderr naming the file, exit code 2, and nothing is simulated.  The file goes through
kvmm._validate.strict_json (UTF-8, no repeated key, no NaN, bounded digits and depth) and the
values are not converted: "12" is not a number, 12.0 is not a count."""

from __future__ import annotations

import json
import re

import pytest

import kvmm.sim.simulator as simulator
from kvmm.cli import main
from kvmm.errors import BadInputError
from kvmm.sim.config import SimConfig
from kvmm.sim.config_json import config_to_json, load_config
from kvmm.traces.trace import KVTrace

INLINE = {"timestamp_ms": [0, 5], "input_length": [16, 32], "output_length": [4, 4], "block_offsets": [0, 1, 3],
          "block_ids": [7, 7, 8], "name": "tiny"}


def inline(**changes):
    out = dict(INLINE)
    out.update(changes)
    return {"workload": {"inline": {k: v for k, v in out.items() if v is not None}}}


def cluster(**changes):
    return {"cluster": {"instances": 2, "router": "round-robin", **changes}}


CASES = [
    (b'{"label": "\xff\xfe"}', r"not UTF-8 text \(byte 0xff at offset 11\)"),
    ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ('{"label": ' + "[" * 40 + "]" * 40 + "}", "nested more than 32 levels deep"),
    ('{"max_requests": ' + "9" * 5000 + "}", "an integer of 5000 digits"),
    ('{"gpu_kv_bytes": ' + "9" * 400 + "}", "an integer of 400 digits"),
    ('{"load": 1' + "0" * 400 + ".5}", "beyond float range"),
    ('{"gpu_kv_bytes": NaN}', "NaN is not a JSON number"),
    ('{"tiers": [{"spec": {"preset": "nvme", "capacity_bytes": Infinity}}]}', "Infinity is not a JSON number"),
    ('{"load": 0.5, "load": 0.6}', "key 'load' appears twice in one object"),
    ('{"cluster": {"instances": 2, "instances": 3}}', "key 'instances' appears twice"),
    (inline(block_ids=None), r"workload.inline: missing \['block_ids'\]"),
    (inline(name=None), r"missing \['name'\]"),
    (inline(timestamp_ms=["0", "5"]), "workload.inline.timestamp_ms must hold integers"),
    (inline(input_length=[16.0, 32.5]), "workload.inline.input_length must hold integers"),
    (inline(columns={"a": {"dtype": "int64", "values": ["1", "2"]}}), r"columns\['a'\] must hold integers"),
    (inline(columns=5), "columns must be a JSON object"),
    (cluster(router_params=5), "router_params must be a mapping of option names to values"),
    (cluster(router_params=[1, 2]), "router_params must be a mapping"),
    (cluster(router_params="load_weight=1"), "router_params must be a mapping"),
    ({"tiers": [{"spec": {"preset": "nvme", "capacity_bytes": "1000"}}]},
     r"tiers\[0\].spec.capacity_bytes must be an integer number of bytes or null, got '1000'"),
    ({"fast_tier": {"preset": "cxl", "capacity_bytes": 1e9}}, "fast_tier.capacity_bytes must be an integer"),
    ({"gpu_kv_bytes": "12"}, r"gpu_kv_bytes must be an integer, got '12' \(str\)"),
    ({"gpu_kv_bytes": 12.0}, r"gpu_kv_bytes must be an integer, got 12.0 \(float\)"),
    ({"gpu_kv_bytes": 2**62}, r"gpu_kv_bytes must be <= 1152921504606846976"),
    ({"max_requests": 10**19}, "max_requests must be <= 9223372036854775807"),
    ({"load": "0.5"}, "load must be a finite number"),
    ({"cluster": {"instances": 2.0}}, "instances must be an integer, got 2.0"),
    ({"model": {"name": "m", "kv_bytes_per_token": 100}}, r"model: missing \['prefill_tokens_per_s'"),
]


@pytest.mark.parametrize("content, match", CASES)
def test_hostile_config_files_are_one_line_errors(content, match, tmp_path):
    path = tmp_path / "config.json"
    if isinstance(content, dict):
        content = json.dumps(content)
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(BadInputError, match=match) as info:
        load_config(path)
    message = str(info.value)
    assert message.startswith(f"--config {str(path)!r}: ") and "\n" not in message and len(message) < 400


@pytest.mark.parametrize("content, match", [CASES[0], CASES[1], CASES[3], CASES[10], CASES[16]])
def test_kvmm_simulate_config_says_it_in_one_line_and_exits_2(content, match, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(simulator, "simulate", lambda *a, **k: pytest.fail("simulated a bad config"))
    path = tmp_path / "config.json"
    path.write_bytes(content if isinstance(content, bytes) else (json.dumps(content) if isinstance(content, dict)
                                                                 else content).encode())
    assert main(["simulate", "--config", str(path), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("kvmm simulate: error: --config ") and "\n" not in err and "Traceback" not in err
    assert re.search(match, err), err


def test_a_written_config_still_reads_back_exactly(tmp_path):
    trace = KVTrace(**{k: __import__("numpy").asarray(v) for k, v in INLINE.items() if k != "name"}, name="tiny")
    for cfg in (SimConfig(), SimConfig(workload=trace, max_requests=2, gpu_kv_bytes=2**40)):
        path = tmp_path / "c.json"
        path.write_text(json.dumps(config_to_json(cfg), indent=2), encoding="utf-8")
        assert config_to_json(load_config(path)) == config_to_json(cfg)
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps({"load": 0.5}).encode())  # a BOM is allowed
    assert load_config(path).load == 0.5


def test_strict_json_keeps_what_json_keeps():
    from kvmm._validate import strict_json

    text = '{"a": [1, -2, 3.5, "x", null, true], "b": {"c": 18446744073709551615}}'
    assert strict_json(text, "t") == json.loads(text)
    assert strict_json(text.encode(), "t") == json.loads(text)
    with pytest.raises(BadInputError, match=r"^t: not JSON \(Expecting value at line 1 column 7\)"):
        strict_json('{"a": }', "t")
