"""Plain-Python reference of :class:`kvmm.policies.CommitmentLedger` (one dict per claim).

Same public API and the same id scheme (``generation << 32 | slot``; released slots reused
LIFO, then never-used slots in order), so tests compare ids directly.  Obviously correct and
slow: every poll walks a dict and sorts with ``sorted``.
"""

from __future__ import annotations

import math

import numpy as np

from kvmm.errors import BadInputError, CapacityExceededError, DoubleFreeError, LedgerStateError, UnknownKeyError

FREE, CLAIMED, PENDING, STAGING, READY, CONSUMED = 0, 1, 2, 3, 4, 5
HOLDING = (STAGING, READY, CONSUMED)


class NaiveLedger:
    def __init__(self, capacity_bytes, sources, *, margin_s=0.005, initial_rate=10_000.0,
                 rate_alpha=0.2, ratio_alpha=0.2, initial_slots=1024):
        if capacity_bytes < 0:
            raise BadInputError("capacity_bytes must be >= 0")
        src = list(sources) if isinstance(sources, (list, tuple)) else [sources]
        self.capacity_bytes = capacity_bytes
        self.margin_s = margin_s
        self.rate = float(initial_rate)
        self.poll_gap = 0.0
        self.last_poll = -1.0
        self.use_slack = 0.0
        self.rate_alpha = rate_alpha
        self.ratio_alpha = ratio_alpha
        self.latency = [getattr(s, "spec", s).latency_s for s in src]
        self.bandwidth = [getattr(s, "spec", s).read_bandwidth for s in src]
        self.ratio = [1.0] * len(src)
        self.queue = [0] * len(src)
        self.claims = {}  # slot -> dict
        self.generation = {}  # slot -> generation
        self.free = []  # released slots, LIFO
        self.next_slot = 0
        self.seq = 0
        self.clock = 0.0
        self.protected_bytes = 0
        self.peak_protected_bytes = 0
        self.commits = 0
        self.in_time = 0
        self.late = 0
        self.released_byte_seconds = 0.0

    # -- helpers
    def _time(self, now):
        if not (now >= self.clock) or math.isinf(now):
            raise BadInputError("bad time")
        self.clock = now

    def _slot(self, cid):
        slot, gen = cid & 0xFFFFFFFF, cid >> 32
        if cid < 0 or slot not in self.claims or self.generation[slot] != gen:
            raise UnknownKeyError(f"claim {cid} unknown")
        return slot

    def _ready_s(self, c):
        src = c["source"]
        return self.ratio[src] * (self.latency[src] + (self.queue[src] + c["nbytes"]) / self.bandwidth[src])

    def _use_at(self, c):
        return (c["updated_at"] + c["delay_s"]) + c["work_ahead"] / self.rate

    # -- API
    def claim_many(self, requests, nbytes, *, now, work_ahead=None, source=None, delay_s=None):
        k = len(requests)
        delay_s = [0.0] * k if delay_s is None else list(delay_s)
        work_ahead = [0.0] * k if work_ahead is None else list(work_ahead)
        source = [0] * k if source is None else list(source)
        for r, nb, wa, sr in zip(requests, nbytes, work_ahead, source):
            if r < 0 or nb < 1 or wa < 0 or not (0 <= sr < len(self.latency)):
                raise BadInputError("bad claim")
            if nb > self.capacity_bytes:
                raise CapacityExceededError("claim larger than capacity")
        self._time(now)
        ids = []
        for r, nb, wa, sr, dl in zip(requests, nbytes, work_ahead, source, delay_s):
            if self.free:
                slot = self.free.pop()
            else:
                slot = self.next_slot
                self.next_slot += 1
                self.generation[slot] = 0
            self.claims[slot] = dict(state=CLAIMED, request=int(r), nbytes=int(nb), source=int(sr),
                                     work_ahead=float(wa), delay_s=float(dl), updated_at=now, deadline=math.inf, seq=self.seq,
                                     claimed_at=now, committed_at=None, predicted=None, ready_at=None, needed_at=None)
            self.seq += 1
            ids.append((self.generation[slot] << 32) | slot)
        return ids

    def claim(self, request, keys=None, nbytes=0, *, now, work_ahead=0.0, source=0, delay_s=0.0):
        return self.claim_many([request], [nbytes], now=now, work_ahead=[work_ahead], source=[source], delay_s=[delay_s])[0]

    def update(self, claim_ids, work_ahead, *, now, delay_s=None):
        slots = [self._slot(c) for c in claim_ids]
        delay_s = [0.0] * len(slots) if delay_s is None else [float(d) for d in delay_s]
        self._time(now)
        earlier = horizon = 0.0
        for s, wa, dl in zip(slots, work_ahead, delay_s):
            old = self._use_at(self.claims[s])
            shift = old - ((now + dl) + float(wa) / self.rate)
            if shift > 0.0:
                earlier += shift
            if old > now:
                horizon += old - now
        if earlier > 0.0 and horizon > 0.0:
            self.use_slack = (1.0 - self.rate_alpha) * self.use_slack + self.rate_alpha * min(earlier / horizon, 1.0)
        for s, wa, dl in zip(slots, work_ahead, delay_s):
            self.claims[s]["delay_s"] = dl
            self.claims[s]["work_ahead"] = float(wa)
            self.claims[s]["updated_at"] = now

    def observe_progress(self, tokens, seconds):
        self.rate = (1.0 - self.rate_alpha) * self.rate + self.rate_alpha * (tokens / seconds)
        if self.rate <= 0.0:
            self.rate = 1e-9

    def request(self, claim_ids, *, now, deadline=None):
        slots = [self._slot(c) for c in claim_ids]
        if any(self.claims[s]["state"] not in (CLAIMED, PENDING) for s in slots):
            raise LedgerStateError("not claimed")
        self._time(now)
        for i, s in enumerate(slots):
            c = self.claims[s]
            d = self._use_at(c) if deadline is None else deadline[i]
            c["deadline"] = min(c["deadline"], d) if c["state"] == PENDING else d
            c["state"] = PENDING

    def poll(self, now, *, timely=True, fifo=False):
        self._time(now)
        if self.last_poll >= 0.0 and now > self.last_poll:
            self.poll_gap = (1.0 - self.rate_alpha) * self.poll_gap + self.rate_alpha * (now - self.last_poll)
        self.last_poll = now
        margin = self.margin_s + self.poll_gap
        if timely:
            for s in sorted(self.claims):
                c = self.claims[s]
                use_at = self._use_at(c)
                if c["state"] == CLAIMED and use_at - self._ready_s(c) - self.use_slack * max(use_at - now, 0.0) <= now + margin:
                    c["state"] = PENDING
                    c["deadline"] = self._use_at(c)
        pending = sorted((0.0 if fifo else c["deadline"], c["seq"], s)
                         for s, c in self.claims.items() if c["state"] == PENDING)
        free = self.capacity_bytes - self.protected_bytes
        granted = []
        for _, _, s in pending:
            c = self.claims[s]
            if c["nbytes"] > free:
                break
            free -= c["nbytes"]
            c["predicted"] = self._ready_s(c)
            self.queue[c["source"]] += c["nbytes"]
            c["committed_at"] = now
            c["state"] = STAGING
            self.protected_bytes += c["nbytes"]
            self.commits += 1
            granted.append((self.generation[s] << 32) | s)
        self.peak_protected_bytes = max(self.peak_protected_bytes, self.protected_bytes)
        return granted

    def mark_ready(self, claim_ids, *, now):
        slots = [self._slot(c) for c in claim_ids]
        if any(self.claims[s]["state"] != STAGING for s in slots):
            raise LedgerStateError("not staging")
        self._time(now)
        for s in slots:
            c = self.claims[s]
            if c["predicted"] > 0:
                a = self.ratio_alpha
                self.ratio[c["source"]] = (1 - a) * self.ratio[c["source"]] + a * ((now - c["committed_at"]) / c["predicted"])
            self.queue[c["source"]] -= c["nbytes"]
            c["ready_at"] = now
            c["state"] = READY

    def need(self, claim_ids, *, now):
        slots = [self._slot(c) for c in claim_ids]
        self._time(now)
        out = []
        for s in slots:
            c = self.claims[s]
            if c["needed_at"] is None:
                c["needed_at"] = now
            if c["state"] in (CLAIMED, PENDING):
                c["deadline"] = min(c["deadline"], now) if c["state"] == PENDING else now
                c["state"] = PENDING
            out.append(c["state"] in (READY, CONSUMED))
        return out

    def consume(self, claim_ids, *, now):
        slots = [self._slot(c) for c in claim_ids]
        if any(self.claims[s]["state"] != READY for s in slots):
            raise LedgerStateError("not ready")
        self._time(now)
        for s in slots:
            c = self.claims[s]
            if c["needed_at"] is None:
                c["needed_at"] = now
            if c["ready_at"] <= c["needed_at"]:
                self.in_time += 1
            else:
                self.late += 1
            c["state"] = CONSUMED

    def release(self, claim_ids, *, now):
        for cid in claim_ids:
            slot, gen = cid & 0xFFFFFFFF, cid >> 32
            if cid >= 0 and slot in self.generation and gen < self.generation[slot]:
                raise DoubleFreeError("already released")
        slots = [self._slot(c) for c in claim_ids]
        if len(set(slots)) != len(slots):
            raise DoubleFreeError("twice in one call")
        self._time(now)
        out = []
        for s in slots:
            c = self.claims.pop(s)
            bs = 0.0
            if c["state"] in HOLDING:
                bs = c["nbytes"] * (now - c["committed_at"])
                self.protected_bytes -= c["nbytes"]
                if c["state"] == STAGING:
                    self.queue[c["source"]] -= c["nbytes"]
            out.append(bs)
            self.generation[s] += 1
            self.free.append(s)
        self.released_byte_seconds += sum(out)
        return out

    def state_of(self, claim_ids):
        return [self.claims[self._slot(c)]["state"] for c in claim_ids]

    def open_ids(self):
        return [(self.generation[s] << 32) | s for s in sorted(self.claims)]

    def predicted_use_time(self, claim_ids):
        return np.array([self._use_at(self.claims[self._slot(c)]) for c in claim_ids], dtype=np.float64)

    def predicted_ready_seconds(self, claim_ids):
        return np.array([self._ready_s(self.claims[self._slot(c)]) for c in claim_ids], dtype=np.float64)

    @property
    def free_bytes(self):
        return self.capacity_bytes - self.protected_bytes

    @property
    def open_claims(self):
        return len(self.claims)

    @property
    def stats(self):
        # the counters the simulator reads (CommitmentLedger.stats has more)
        return {"ready_in_time": self.in_time, "ready_late": self.late}

    def check(self):
        assert self.protected_bytes == sum(c["nbytes"] for c in self.claims.values() if c["state"] in HOLDING)
        assert 0 <= self.protected_bytes <= self.capacity_bytes
