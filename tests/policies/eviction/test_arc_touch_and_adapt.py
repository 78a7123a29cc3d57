"""ARCPolicy.touch and ARCPolicy.adapt: the two events vLLM's CPU offloading gives a cache policy
besides insert, use and evict (kvmm.integrations.vllm: an uncounted reference to a chunk a
request only stored, and a store miss seen before the eviction that makes its room)."""

import pytest

from kvmm.errors import UnknownKeyError
from kvmm.policies import ARCPolicy


def arc_with_ghosts():
    """c = 3: T1 = [3], T2 = [1], B1 = [2, 4] (4 the most recent ghost)."""
    arc = ARCPolicy(capacity=3)
    for key in (1, 2, 3):
        arc.on_insert(key)
    arc.on_access(1)
    arc.on_remove(2)
    arc.on_insert(4)
    arc.on_remove(4)
    arc.check()
    assert arc.lists() == {"T1": [3], "T2": [1], "B1": [2, 4], "B2": []}
    return arc


def test_touch_refreshes_within_the_list_without_promoting():
    arc = ARCPolicy(capacity=4)
    for key in (1, 2, 3):
        arc.on_insert(key)
    arc.on_access(3)
    arc.touch(1)  # T1's oldest becomes T1's newest; it stays seen once
    arc.touch(3)
    assert arc.lists() == {"T1": [2, 1], "T2": [3], "B1": [], "B2": []}
    assert arc.victims(1) == [2]
    arc.check()


def test_touch_of_an_untracked_key_is_refused_without_change():
    arc = arc_with_ghosts()
    before = (arc.lists(), arc.p)
    for key in (2, 99):  # a ghost is not resident either
        with pytest.raises(UnknownKeyError, match="does not track"):
            arc.touch(key)
    assert (arc.lists(), arc.p) == before


def test_adapt_counts_the_ghost_miss_once_and_the_insert_does_not_again():
    arc = arc_with_ghosts()
    assert arc.adapt(2) is True
    assert arc.p == 1.0  # B1 hit: p + max(|B2| / |B1|, 1) = 0 + 1
    assert arc.ghosts() == ([4, 2], [])  # the most recent ghost now
    assert arc.adapt(2) is True  # a second miss (another request) adapts again
    assert arc.p == 2.0
    arc.on_insert(2)  # the paper's placement: a returning ghost is seen twice
    assert arc.p == 2.0 and arc.lists()["T2"] == [1, 2]
    arc.check()


def test_adapt_of_a_key_that_is_no_ghost_changes_nothing():
    arc = arc_with_ghosts()
    before = (arc.lists(), arc.p)
    assert arc.adapt(99) is False and arc.adapt(3) is False  # unknown, resident
    assert (arc.lists(), arc.p) == before


def test_a_mark_does_not_outlive_the_ghost_stay_it_was_made_in():
    arc = arc_with_ghosts()
    arc.adapt(4)
    arc.on_insert(4)  # consumes the mark
    arc.adapt(2)
    arc.on_insert(2)
    assert arc.p == 2.0
    arc.on_remove(2)  # a ghost again: a new stay, unmarked
    arc.check()
    p = arc.p
    arc.on_insert(2)  # a ghost hit that adapt() did not count: the insert adapts
    assert arc.p != p
    arc.check()
