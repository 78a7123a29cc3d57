"""KvmmStoragePlugin loaded by LMCache 0.5.6's storage_plugin_launcher over kvmm tiers (lmcache venv only)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kvmm.testing.engines.lmcache_replay import chunk_key  # first: quiets LMCache's logs

# isort: split
import torch  # noqa: E402
from lmcache.v1.memory_management import MemoryFormat  # noqa: E402

import kvmm.integrations.lmcache as kl  # noqa: E402
from kvmm.errors import BadInputError, CapacityExceededError, DTypeError, ShapeError  # noqa: E402
from kvmm.testing.engines.lmcache_plugin_helpers import (  # noqa: E402
    expected_bytes,
    launch,
    put_chunks,
    random_chunk,
    read_back,
    snapshot,
)
from kvmm.tiers import ManagedTier, MmapTier  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CHUNK_VALUE = 4096 + 67  # one stored chunk: its 4 KiB plus the plugin's 67-byte header (pinned below)


def mmap_settings(path, **extra):
    return {"tier": "mmap", "path": str(path), "capacity_bytes": 1 << 22, **extra}


def test_launcher_loads_the_plugin_over_mmap_and_it_round_trips_after_reopen(tmp_path):
    backend, plugin = launch(mmap_settings(tmp_path))
    assert isinstance(plugin, kl.KvmmStoragePlugin) and plugin.get_allocator_backend() is backend
    assert isinstance(plugin.tier, ManagedTier) and isinstance(plugin.tier.backend, MmapTier)
    put_chunks(backend, plugin, range(5))
    put_chunks(backend, plugin, [7], dtype=torch.bfloat16)  # no numpy dtype: stored as bytes
    assert plugin.batched_contains([chunk_key(s) for s in (0, 1, 2, 9, 3)]) == 3  # leading hits
    assert read_back(plugin, 2) == (expected_bytes(2), (2, 1, 16, 64), torch.float16, MemoryFormat.KV_2LTD)
    plugin.close()
    backend, plugin = launch(mmap_settings(tmp_path))  # a restarted engine, same folder
    for s in range(5):
        assert read_back(plugin, s) == (expected_bytes(s), (2, 1, 16, 64), torch.float16, MemoryFormat.KV_2LTD)
    assert read_back(plugin, 7, torch.bfloat16) == (expected_bytes(7), (2, 1, 16, 64), torch.bfloat16, MemoryFormat.KV_2LTD)
    assert read_back(plugin, 7, torch.float16) is None  # the dtype is part of LMCache's key
    assert plugin.get_blocking(chunk_key(99)) is None
    plugin.close()


WRITER = textwrap.dedent("""
    import sys
    sys.path.insert(0, {root!r})
    from kvmm.testing.engines.lmcache_plugin_helpers import launch, put_chunks
    backend, plugin = launch({settings!r})
    seed = 0
    while True:
        put_chunks(backend, plugin, [seed])
        print(seed, flush=True)
        seed += 1
""")


def test_kill_9_of_a_writer_serves_nothing_torn(tmp_path):
    settings = mmap_settings(tmp_path, capacity_bytes=1 << 30)
    proc = subprocess.Popen([sys.executable, "-c", WRITER.format(root=str(ROOT), settings=settings)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=ROOT,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)))
    done = [int(proc.stdout.readline()) for _ in range(200)]  # 200 puts completed
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    backend, plugin = launch(settings)
    stored = sorted(int(k.split("@")[3], 16) for k in plugin.tier.keys())
    # every reported put survived, and the writer got no further than one past what it printed
    assert set(done) <= set(stored) and stored == list(range(len(stored))) and len(stored) >= 200
    for s in stored:  # nothing torn is served: every chunk present is byte-exact
        assert read_back(plugin, s)[0] == expected_bytes(s)
    plugin.close()


def test_pinned_chunks_are_not_evicted_and_forced_remove_releases_pins(tmp_path):
    backend, plugin = launch(mmap_settings(tmp_path, capacity_bytes=2 * CHUNK_VALUE, eviction="lru"))
    put_chunks(backend, plugin, [0, 1])
    assert plugin.contains(chunk_key(0), pin=True) and plugin.pin(chunk_key(0))
    assert plugin.pinned() == {chunk_key(0).to_string(): 2}
    put_chunks(backend, plugin, [2])  # the LRU victim is 0, but it is pinned: 1 goes
    assert [plugin.contains(chunk_key(s)) for s in range(3)] == [True, False, True]
    assert not plugin.remove(chunk_key(0), force=False)  # an internal remove never takes a pinned chunk
    assert plugin.unpin(chunk_key(0)) and plugin.pinned() == {chunk_key(0).to_string(): 1}
    assert plugin.remove(chunk_key(0))  # forced, from outside: drops the chunk and its pin
    assert plugin.pinned() == {} and not plugin.contains(chunk_key(0))
    assert not plugin.unpin(chunk_key(0)) and not plugin.pin(chunk_key(0))
    plugin.close()


def test_touch_cache_counts_the_lookup_as_a_hit(tmp_path):
    backend, plugin = launch(mmap_settings(tmp_path, capacity_bytes=3 * CHUNK_VALUE, eviction="lru"))
    put_chunks(backend, plugin, [0, 1, 2])
    assert plugin.batched_contains([chunk_key(0), chunk_key(1)], pin=True) == 2
    plugin.touch_cache()
    plugin.unpin(chunk_key(0)), plugin.unpin(chunk_key(1))
    assert plugin.tier.policy.keys() == [s.to_string() for s in (chunk_key(2), chunk_key(1), chunk_key(0))]
    put_chunks(backend, plugin, [3])
    assert not plugin.contains(chunk_key(2))
    plugin.close()


@pytest.mark.parametrize("make_call, error, match", [
    (lambda p, b: p.batched_submit_put_task([chunk_key(5), "not-a-key"], [random_chunk(b, 5), random_chunk(b, 6)]),
     DTypeError, "CacheEngineKey"),
    (lambda p, b: p.batched_submit_put_task([chunk_key(5), chunk_key(6, torch.bfloat16)],
                                            [random_chunk(b, 5), random_chunk(b, 6)]), DTypeError, "dtype"),
    (lambda p, b: p.batched_submit_put_task([chunk_key(5), chunk_key(6)], [random_chunk(b, 5)]), ShapeError, "one object"),
    (lambda p, b: p.batched_submit_put_task([chunk_key(5)], [torch.zeros(4)]), BadInputError, "MemoryObj"),
    (lambda p, b: p.contains(1234), DTypeError, "CacheEngineKey"),
])
def test_bad_input_raises_and_leaves_the_tier_unchanged(tmp_path, make_call, error, match):
    backend, plugin = launch(mmap_settings(tmp_path))
    put_chunks(backend, plugin, [0, 1])
    before = snapshot(plugin)
    with pytest.raises(error, match=match):
        make_call(plugin, backend)
    assert snapshot(plugin) == before and plugin.pinned() == {}
    plugin.close()


@pytest.mark.parametrize("on_full", ["skip", "raise"])
def test_a_full_tier_that_cannot_evict_changes_nothing(tmp_path, on_full):
    backend, plugin = launch(mmap_settings(tmp_path, capacity_bytes=2 * CHUNK_VALUE, eviction="none", on_full=on_full))
    put_chunks(backend, plugin, [0, 1])
    before = snapshot(plugin)
    if on_full == "raise":
        with pytest.raises(CapacityExceededError):
            put_chunks(backend, plugin, [2])
    else:
        put_chunks(backend, plugin, [2])  # LMCache's rule for a full disk: not stored, logged
        assert plugin.refused == 1
    assert snapshot(plugin) == before
    plugin.close()


@pytest.mark.parametrize("settings, match", [
    ({"tier": "tape"}, "tier='tape'"),
    ({"tier": "mmap"}, "needs path"),
    ({"tier": "arena"}, "needs capacity_bytes"),
    ({"tier": "arena", "capacity_bytes": "lots"}, "capacity_bytes='lots'"),
    ({"tier": "arena", "capacity_bytes": 4096, "eviction": "random"}, "eviction='random'"),
    ({"tier": "arena", "capacity_bytes": 4096, "colour": "red"}, "unknown kvmm plugin setting storage_plugin.kvmm.colour"),
    ({"tier": "arena", "capacity_bytes": 4096, "on_full": "shrug"}, "on_full='shrug'"),
])
def test_bad_settings_are_named(settings, match):
    backend, plugin = launch(settings)
    assert plugin is None  # LMCache's launcher logs the error and goes on without the plugin
    with pytest.raises(BadInputError, match=match):
        kl.KvmmStoragePlugin(config=backend.config, local_cpu_backend=backend)


def test_arena_tier_with_arc(tmp_path):
    backend, plugin = launch({"tier": "arena", "capacity_bytes": 3 * CHUNK_VALUE, "eviction": "arc"})
    put_chunks(backend, plugin, range(6))
    assert len(plugin.tier.keys()) == 3 and type(plugin.tier.policy).__name__ == "ARCPolicy"
    assert read_back(plugin, 5)[0] == expected_bytes(5)


def test_one_chunk_takes_chunk_value_bytes_in_the_tier(tmp_path):
    # The capacities above are counted in CHUNK_VALUE: pin what one 4 KiB chunk costs in the tier.
    backend, plugin = launch(mmap_settings(tmp_path))
    put_chunks(backend, plugin, [0])
    assert plugin.tier.used_bytes == CHUNK_VALUE
    plugin.close()
