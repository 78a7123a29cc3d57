"""MmapTier under ``kill -9`` in a loop: a forked writer runs seeded puts, overwrites and deletes
(with seals and compactions, small segments) and is SIGKILLed after a random delay, 40 times
on one folder.  After each kill the folder must reopen to exactly the state after the writer's
last confirmed operation, or after the one operation it had started: never an older value,
never a deleted key, never a report of damage."""

import os
import random
import signal
import time

import numpy as np

from kvmm.tiers import MmapTier

KILLS = 40
KEYS = 24
TIER_ARGS = dict(capacity_bytes=1 << 24, segment_bytes=16 * 1024, gc_bytes=8 * 1024)


def operations(round_):
    """The writer's operations in round ``round_``: (key, value) puts and (key, None) deletes;
    every value is unique (it holds the round and the operation number)."""
    rng = random.Random(round_)
    i = 0
    while True:
        key = rng.randrange(KEYS)
        if rng.random() < 0.7:
            yield key, np.full(rng.randrange(0, 1500), round_ * 1_000_000 + i, dtype=np.uint32)
        else:
            yield key, None
        i += 1


def apply(state, key, value):
    if value is None:
        state.pop(key, None)
    else:
        state[key] = value


def writer(folder, round_, progress_fd):
    """The child: apply operations, writing one byte to the pipe after each one returns."""
    tier = MmapTier(folder, **TIER_ARGS)
    for key, value in operations(round_):
        if value is None:
            if tier.contains(key):
                tier.delete(key)
        else:
            tier.put(key, value)
        os.write(progress_fd, b"+")


def run_and_kill(folder, round_, wait_for, delay):
    """Fork a writer, let it confirm ``wait_for`` operations, wait ``delay`` seconds more,
    SIGKILL it; returns how many operations it confirmed."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.close(read_fd)
        try:
            writer(folder, round_, write_fd)
        finally:
            os._exit(1)
    os.close(write_fd)
    confirmed = 0
    while confirmed < wait_for:
        chunk = os.read(read_fd, wait_for - confirmed)
        assert chunk, "the writer died on its own"
        confirmed += len(chunk)
    time.sleep(delay)
    os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    while chunk := os.read(read_fd, 1 << 16):
        confirmed += len(chunk)
    os.close(read_fd)
    return confirmed


def read_state(folder):
    with MmapTier(folder, **TIER_ARGS) as tier:
        report = tier.recovery
        state = {key: tier.get(key) for key in tier.keys()}
        tier.check()
    return state, report


def same(a, b):
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) and a[k].dtype == b[k].dtype for k in a)


def test_kill_9_in_a_loop_never_loses_a_confirmed_write_nor_serves_a_stale_one(tmp_path):
    rng = random.Random(12)
    model: dict = {}
    total_confirmed = 0
    for round_ in range(KILLS):
        # Some kills land while the writer is still opening (recovering) the folder.
        wait_for = 0 if round_ % 8 == 0 else rng.randrange(1, 150)
        confirmed = run_and_kill(tmp_path, round_, wait_for, rng.random() * 0.003)
        total_confirmed += confirmed
        ops = operations(round_)
        for _ in range(confirmed):
            apply(model, *next(ops))
        with_next = dict(model)
        apply(with_next, *next(ops))  # the operation in flight may or may not have happened
        state, report = read_state(tmp_path)
        assert same(state, model) or same(state, with_next), f"round {round_}: not a state the writer reached"
        assert report["damaged_segments"] == {} and report["dropped_keys"] == [] and report["torn"] <= 1
        model = state
    assert total_confirmed > 1500  # the kills landed in a busy writer, across many segments
