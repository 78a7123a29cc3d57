"""numba replay of ARC (see :func:`kvmm.policies.replay`): libCacheSim's ``ARC.c``, which is
:class:`~kvmm.policies.ARCPolicy` driven by a :class:`~kvmm.tiers.ManagedTier`.

Four lists over dense ids, most recent at the head: T1 (residents seen once), T2 (residents
seen again), B1 and B2 (ghosts: keys evicted from T1 / T2, with the size they had).  Every list
is accounted by the total size of its entries and ``c`` is the capacity in the same units; the
target size ``p`` of T1 is a float.  Per reference ``x`` of size ``s``:

* ``x`` in T1 or T2: a hit; ``x`` moves to T2's head (a hit does not resize it).
* ``x`` a B1 ghost: ``p = min(p + max(|B2| / |B1|, 1), c)``; a B2 ghost:
  ``p = max(p - max(|B1| / |B2|, 1), 0)`` (a zero total counts as the step 1, as in
  ARCPolicy); the ghost is forgotten.  Then, while ``|T1| + |T2| + s > c``, REPLACE: T1's
  tail becomes a B1 ghost when ``|T1| > 0`` and (``|T1| > p``, or ``|T1| == p`` and ``x`` was a
  B2 ghost), or when ``|T2| == 0``; else T2's tail becomes a B2 ghost.  ``x`` goes to T2's head.
* otherwise (case IV), each eviction step first: when ``|T1| + |B1| + s > c``, forget B1's
  tail ghost and REPLACE if ``|B1| > 0``, else T1's tail leaves *without* a ghost; otherwise,
  when the directory ``|T1| + |T2| + |B1| + |B2| >= 2c`` and ``|B2| > 0``, forget B2's tail
  ghost, then REPLACE.  ``x`` goes to T1's head.

A key larger than ``c`` is a miss and is not inserted.  When such a key is a ghost, libCacheSim
still adapts ``p`` and forgets the ghost (its ``find`` runs before the size check) and so does
this replay; a :class:`~kvmm.tiers.ManagedTier` refuses the put and leaves ARCPolicy as it was.
The two can differ only when a key's size changes between references (it always fits once it
fitted once otherwise).

Worked example, c = 2, unit sizes, references ``a b a c b``::

    a: miss  T1 a              b: miss  T1 b a
    a: hit   T1 b, T2 a        c: miss  |T1| + |B1| + 1 = 2 is not > 2, directory 2 < 4:
                                        REPLACE: |T1| = 1 > p = 0 -> b to B1; T1 c, T2 a
    b: B1 ghost: p = 1; REPLACE: |T1| = 1 is not > 1 -> a to B2; T1 c, T2 b

Runtime complexity: O(1) per reference plus the ghosts forgotten (each ghost once).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from kvmm.errors import BadInputError

PARAMS_ARC: tuple = ()

NONE = -1
# where a dense id is (list numbers index heads/tails/totals)
ABSENT, T1, T2, B1, B2 = -1, 0, 1, 2, 3


def replay_arc(keys, dense, n_unique, sizes, capacity):
    """Hits of ARC over ``dense`` (see :mod:`kvmm.policies.eviction._replay`)."""
    if n_unique >= 2**31:  # the kernel's int32 links
        raise BadInputError(f"replay('arc') takes fewer than 2**31 distinct keys, got {n_unique}")
    return _replay_arc(dense, n_unique, sizes, capacity)


@njit(cache=True, nogil=True)
def _replay_arc(dense, n_unique, sizes, c):
    # The list operations are written out inline, not as helper functions: a jitted call that
    # takes arrays pays reference counting per array per call, which made the kernel 5x slower.
    hits = np.zeros(dense.size, np.bool_)
    # per-key state in narrow dtypes (int8 list number, int32 links): more keys stay in cache
    where = np.full(n_unique, ABSENT, np.int8)  # which list holds the key
    prev = np.full(n_unique, NONE, np.int32)  # towards the head (more recent)
    next_ = np.full(n_unique, NONE, np.int32)  # towards the tail (older)
    size_of = np.zeros(n_unique, np.int64)  # the size it was inserted with (kept as a ghost)
    head = np.full(4, NONE, np.int64)
    tail = np.full(4, NONE, np.int64)
    total = np.zeros(4, np.int64)
    p = 0.0
    for i in range(dense.size):
        x = dense[i]
        at = where[x]
        if at == T2 and head[T2] == x:  # a hit on T2's most recent key: nothing moves
            hits[i] = True
            continue
        in_b2 = at == B2
        if at == B1:  # case II: the recency side was too small (the totals before x leaves B1)
            delta = total[B2] / total[B1] if total[B1] > 0 else 1.0
            p = min(p + max(delta, 1.0), float(c))
        elif in_b2:  # case III: the frequency side was too small
            delta = total[B1] / total[B2] if total[B2] > 0 else 1.0
            p = max(p - max(delta, 1.0), 0.0)
        if at != ABSENT:  # a hit, or a ghost that is forgotten (it comes back, or is refused),
            # after p is adapted
            before = prev[x]
            after = next_[x]
            if before == NONE:
                head[at] = after
            else:
                next_[before] = after
            if after == NONE:
                tail[at] = before
            else:
                prev[after] = before
            total[at] -= size_of[x]
        if at == T1 or at == T2:  # case I: a hit, to T2's head (a hit does not resize)
            hits[i] = True
            dest = T2
        else:
            s = sizes[i]
            where[x] = ABSENT
            if s > c:  # larger than the whole cache: a miss, never inserted
                continue
            ghost = at != ABSENT
            while total[T1] + total[T2] + s > c:
                # one eviction step: forget the tail ghost of list `forget` (NONE: none), then
                # the tail of `source` leaves, becoming a ghost of `to` (NONE: no ghost)
                forget = NONE
                replace = True
                if not ghost:
                    if total[T1] + total[B1] + s > c:  # case IV-A: L1 = T1 + B1 is full
                        if total[B1] > 0:
                            forget = B1
                        else:  # T1 alone fills c: its oldest leaves without becoming a ghost
                            replace = False
                    elif total[T1] + total[T2] + total[B1] + total[B2] >= 2 * c and total[B2] > 0:
                        forget = B2  # case IV-B: the directory is full
                if not replace:
                    source, to = T1, NONE
                elif (total[T1] > 0 and (total[T1] > p or (total[T1] == p and in_b2))) or total[T2] == 0:
                    source, to = T1, B1  # REPLACE from T1
                else:
                    source, to = T2, B2  # REPLACE from T2
                if forget != NONE:
                    old = tail[forget]
                    before = prev[old]
                    tail[forget] = before
                    if before == NONE:
                        head[forget] = NONE
                    else:
                        next_[before] = NONE
                    total[forget] -= size_of[old]
                    where[old] = ABSENT
                victim = tail[source]
                before = prev[victim]
                tail[source] = before
                if before == NONE:
                    head[source] = NONE
                else:
                    next_[before] = NONE
                total[source] -= size_of[victim]
                if to == NONE:
                    where[victim] = ABSENT
                else:
                    first = head[to]
                    prev[victim] = NONE
                    next_[victim] = first
                    if first == NONE:
                        tail[to] = victim
                    else:
                        prev[first] = victim
                    head[to] = victim
                    where[victim] = to
                    total[to] += size_of[victim]
            size_of[x] = s
            dest = T2 if ghost else T1
        first = head[dest]
        prev[x] = NONE
        next_[x] = first
        if first == NONE:
            tail[dest] = x
        else:
            prev[first] = x
        head[dest] = x
        where[x] = dest
        total[dest] += size_of[x]
    return hits
