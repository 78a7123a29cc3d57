"""Plain-Python LIRS replay, written from the documented behaviour of libCacheSim's ``LIRS``
(Jiang & Zhang, SIGMETRICS 2002, with libCacheSim's byte accounting and its own rules).

State: the stack S (every recently seen key, most recent last; each LIR, resident HIR or
non-resident HIR), the queue Q (resident HIR keys, most recent last), NH (the non-resident HIR
keys of S, most recent last).  ``hirs_limit = max(1, int(0.01 * capacity))`` bytes for the HIR
residents, ``lirs_limit = capacity - hirs_limit`` for the LIR ones.

* demote (libCacheSim's evictLIR): S's bottom leaves S; it becomes a resident HIR at Q's top if it
  fits ``hirs_limit`` (Q's oldest leave first, see evict_hir), else it leaves the cache; then prune.
* evict_hir: Q's oldest leaves the cache; if it is in S it becomes non-resident there (and joins NH).
* prune: while S's bottom is HIR and is not also S's top, it leaves S (and NH).
* hit on an LIR key: to S's top, prune.  Hit on a resident HIR in S: to S's top, it leaves Q,
  demote until ``lir + size <= lirs_limit``, it becomes LIR.  Hit on a resident HIR only in Q: to
  Q's top, demote until ``lir + size <= lirs_limit``, it enters S's top as a resident HIR.
* miss on a non-resident HIR of S (to S's top): demote until its stored size fits ``lirs_limit``,
  it leaves NH; then while the cache is over capacity: evict_hir while ``hir >= hirs_limit``, then
  demote; it becomes a resident LIR.
* miss on an unknown key: refused if larger than either limit; if neither set has room, evict_hir
  until the HIR set has room; it becomes LIR if the LIR set has room, else a resident HIR (S's top and Q's top).
* after every reference: while S's keys total more than ``2 * capacity`` bytes, NH's oldest leaves S.

Where libCacheSim's C code is not followed: in a hit on a resident HIR only in Q, the demotions can
push that key itself out of Q (possible with sizes only); libCacheSim then keeps reading the size
of the freed Q object (``cache_obj_q->obj_size`` in ``hit_RD_HIRinQ``), i.e. of whatever the
allocator put there next.  Here the loop uses the key's own size.  ``own_eviction_hits`` counts
those references, so the tests compare with libCacheSim up to the first of them.
"""

from collections import OrderedDict


class NaiveLIRS:
    def __init__(self, capacity, hirs_ratio=0.01, protect_referenced=False):
        """``protect_referenced``: the referenced key is never pushed out of Q by its own
        reference (kvmm's LIRSPolicy under a ManagedTier); False: libCacheSim's C code."""
        self.capacity = capacity
        self.protect_referenced = protect_referenced
        self.referenced = None
        self.hirs_limit = max(1, int(hirs_ratio * capacity))
        self.lirs_limit = capacity - self.hirs_limit
        self.s = OrderedDict()  # key -> [is_lir, resident, size], bottom first
        self.q = OrderedDict()  # key -> size, oldest first
        self.nh = OrderedDict()  # key -> size, oldest first
        self.lir = 0
        self.hir = 0
        self.occupied = 0
        self.s_bytes = 0
        self.own_eviction_hits = 0
        self.hir_bottom_demotions = 0

    def residents(self):
        return {k for k, e in self.s.items() if e[1]} | set(self.q)

    # -- the pieces -------------------------------------------------------------------------
    def _s_top(self, key):
        self.s.move_to_end(key)

    def _s_drop_bottom(self):
        key, entry = self.s.popitem(last=False)
        self.s_bytes -= entry[2]
        return key, entry

    def prune(self):
        while len(self.s) > 1:
            key, entry = next(iter(self.s.items()))
            if entry[0]:
                break
            if not entry[1] and key in self.nh:
                del self.nh[key]
            self._s_drop_bottom()

    def evict_hir(self):
        """Q's oldest (not the referenced key, when protected) leaves; False if there is none."""
        key = next((k for k in self.q if not (self.protect_referenced and k == self.referenced)), None)
        if key is None:
            return False
        size = self.q.pop(key)
        self.hir -= size
        if key in self.s:
            self.s[key][1] = False
            self.nh[key] = size
        self.occupied -= size
        return True

    def demote(self):
        if not self.s:
            return False
        bottom_key, bottom = next(iter(self.s.items()))
        if not bottom[0]:  # a lone HIR key left at S's bottom by pruning (tiny caches)
            self.hir_bottom_demotions += 1
            if self.protect_referenced:  # kvmm demotes the lowest LIR key instead
                key = next((k for k, e in self.s.items() if e[0]), None)
                if key is None:
                    return False
                entry = self.s.pop(key)
                self.s_bytes -= entry[2]
                return self._demoted(key, entry)
        key, entry = self._s_drop_bottom()  # libCacheSim takes the bottom whatever it is
        return self._demoted(key, entry)

    def _demoted(self, key, entry):
        size = entry[2]
        self.lir -= size
        self.occupied -= size
        if size <= self.hirs_limit:
            while self.hir + size > self.hirs_limit and self.evict_hir():
                pass
            self.q[key] = size
            self.hir += size
            self.occupied += size
        self.prune()
        return True

    def delete(self, key):
        """An explicit delete (libCacheSim's LIRS_remove): the key leaves S and Q; removing an
        LIR key prunes S."""
        entry = self.s.pop(key, None)
        if entry is not None:
            self.s_bytes -= entry[2]
            if entry[0]:
                self.lir -= entry[2]
                self.occupied -= entry[2]
                self.prune()
                return
        size = self.q.pop(key)
        self.hir -= size
        self.occupied -= size

    def make_room(self, size):
        """Never needed with libCacheSim's rules; with the referenced key protected, Q can exceed
        its limit, and then Q's oldest (then demoted LIR keys) leave until the key fits."""
        while self.occupied + size > self.capacity and self.evict_hir():
            pass
        while self.occupied + size > self.capacity and self.demote():
            while self.occupied + size > self.capacity and self.evict_hir():
                pass

    def _s_push(self, key, is_lir, size):
        self.s[key] = [is_lir, True, size]
        self.s_bytes += size

    # -- one reference ----------------------------------------------------------------------
    def reference(self, key, size):
        self.referenced = key
        hit = self._reference(key, size)
        while self.s_bytes > 2 * self.capacity and self.nh:
            old, old_size = self.nh.popitem(last=False)
            self.s_bytes -= self.s.pop(old)[2]
        return hit

    def _reference(self, key, size):
        entry = self.s.get(key)
        if entry is not None:
            self._s_top(key)
        if key in self.q:
            self.q.move_to_end(key)
        if entry is not None and entry[0]:
            self.prune()
            return True
        if entry is not None and entry[1]:  # resident HIR in S
            if key in self.q:
                q_size = self.q.pop(key)
                self.hir -= q_size
                self.occupied -= q_size
            while self.lir + entry[2] > self.lirs_limit and self.demote():
                pass
            entry[0] = True
            self.lir += entry[2]
            self.occupied += entry[2]
            return True
        if entry is None and key in self.q:  # resident HIR only in Q
            q_size = self.q[key]
            while self.lir + q_size > self.lirs_limit and self.demote():
                pass
            if key not in self.q:  # pushed out of Q by its own demotions (see the module docstring)
                self.own_eviction_hits += 1
            self._s_push(key, False, q_size)
            return True
        # a miss
        if size > self.capacity:
            return False
        if entry is not None:  # non-resident HIR in S
            while self.lir + entry[2] > self.lirs_limit and self.demote():
                pass
            if key in self.nh:
                del self.nh[key]
            while self.occupied + size > self.capacity:
                while self.hir >= self.hirs_limit and self.evict_hir():
                    pass
                if not self.demote():
                    break
            self.make_room(entry[2])
            entry[0] = entry[1] = True
            self.lir += entry[2]
            self.occupied += entry[2]
            return False
        if size > self.lirs_limit or size > self.hirs_limit:
            return False
        lir_full = self.lir + size > self.lirs_limit
        if lir_full and self.hir + size > self.hirs_limit:
            while self.hir + size > self.hirs_limit and self.evict_hir():
                pass
        while self.occupied + size > self.capacity:
            if not (self.lir + size > self.lirs_limit and self.hir + size > self.hirs_limit and self.evict_hir()):
                break
        self.make_room(size)
        if self.lir + size <= self.lirs_limit:
            self._s_push(key, True, size)
            self.lir += size
        else:
            self._s_push(key, False, size)
            self.q[key] = size
            self.hir += size
        self.occupied += size
        return False


def replay_lirs_naive(keys, capacity, sizes=None, hirs_ratio=0.01):
    return replay_lirs_naive_checked(keys, capacity, sizes, hirs_ratio)[0]


def replay_lirs_naive_checked(keys, capacity, sizes=None, hirs_ratio=0.01, quirks=False):
    """``(hits, n)``: the hits, and how many leading references are free of the libCacheSim
    use-after-free case (all of them when it never happens); ``quirks=True`` also stops at the
    first demotion of a lone HIR bottom and at any reference that pushes the referenced key out of
    Q (the two places where kvmm's LIRSPolicy departs from libCacheSim)."""
    sizes = [1] * len(keys) if sizes is None else list(sizes)
    cache = NaiveLIRS(capacity, hirs_ratio)
    hits = []
    clean = None
    for i, (key, size) in enumerate(zip(keys, sizes)):
        hits.append(cache.reference(key, size))
        if clean is None and (cache.own_eviction_hits or (quirks and cache.hir_bottom_demotions)):
            clean = i + 1  # that reference's own hit/miss still agrees; the state after it may not
    return hits, len(hits) if clean is None else clean
