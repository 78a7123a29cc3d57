"""Every registered eviction order by name: ``--tier dram:64GiB:<order>:write-all`` parses and a
``kvmm simulate`` run evicts with it; the engine adapters' policy rule (what vLLM's and LMCache's
``make_cache_policy`` run first) takes each registered factory.  Written over EVICTION_POLICIES, so
an order registered later is covered with nothing to add here.

``kvmm.integrations.vllm.make_cache_policy`` itself imports vLLM at module import, so the main
suite cannot call it; ``tests/integrations/test_vllm_every_order.py`` does, in the vLLM venv."""

from __future__ import annotations

import json

import pytest

from kvmm.cli import main
from kvmm.cli.simulate import parse_tier
from kvmm.errors import BadInputError
from kvmm.integrations._policy_factory import policy_factory
from kvmm.policies import EVICTION_POLICIES
from kvmm.protocols import EvictionPolicy
from kvmm.sim.config import make_eviction

# Offline orders (Belady: ``offline = True``) need the future reference stream, which a tier in
# the simulator or an engine's cache cannot know; they are refused by name (tested below).
ORDERS = sorted(name for name, cls in EVICTION_POLICIES.items() if not getattr(cls, "offline", False))
OFFLINE = sorted(set(EVICTION_POLICIES) - set(ORDERS))


def needs_no_arguments(order):
    """Skip an order whose factory cannot run without arguments: it cannot be named in a tier
    spec alone."""
    try:
        EVICTION_POLICIES[order]()
    except TypeError as exc:
        pytest.skip(f"{order!r} cannot be built by name alone: {exc}")


def test_the_registry_holds_at_least_the_classic_orders():
    assert {"lru", "fifo", "lfu", "arc"} <= set(ORDERS)
    assert OFFLINE == ["belady"]


@pytest.mark.parametrize("order", OFFLINE)
def test_offline_orders_are_refused_by_name_saying_why(order):
    with pytest.raises(BadInputError, match="future reference stream"):
        parse_tier(f"dram:64GiB:{order}:write-all")
    with pytest.raises(BadInputError, match="future reference stream"):
        policy_factory(EVICTION_POLICIES[order])


@pytest.mark.parametrize("order", ORDERS)
def test_tier_spec_parses_for_every_order(order):
    needs_no_arguments(order)
    level = parse_tier(f"dram:64GiB:{order}:write-all")
    assert (level.eviction, level.admission, level.capacity_bytes) == (order, "write-all", 64 * 2**30)
    assert type(make_eviction(level.eviction)) is EVICTION_POLICIES[order]
    assert parse_tier(f"dram:64GiB:{order.upper()}:write-all").eviction == order.upper()  # names in any case


@pytest.mark.parametrize("order", ORDERS)
def test_simulate_runs_every_order_by_name(order, capsys):
    needs_no_arguments(order)
    assert main(["simulate", "--requests", "40", "--tier", f"dram:2GiB:{order}:write-all", "--staging", "on-demand",
                 "--json", "--no-progress"]) == 0
    [row] = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert row["requests"] == 40
    assert row["tier_evictions"][0] > 0 and row["tier_block_hits"][0] > 0  # 2 GiB fills: the order chose victims


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("need_contains", [False, True])  # vLLM's adapter, LMCache's (asks `key in policy`)
def test_the_adapters_policy_rule_takes_every_registered_factory(order, need_contains):
    needs_no_arguments(order)
    factory, probe = policy_factory(EVICTION_POLICIES[order], need_contains=need_contains)
    assert type(probe) is EVICTION_POLICIES[order] and isinstance(probe, EvictionPolicy)
    assert factory() is not factory()  # a fresh policy per engine backend
    template = EVICTION_POLICIES[order]()
    template.on_insert("a")
    factory, _ = policy_factory(template, need_contains=need_contains)
    copy = factory()
    assert copy is not template and "a" in copy and len(copy) == 1
