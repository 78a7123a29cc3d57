"""Plain-Python references of the token scorers in ``kvmm.compress.scorers`` (lists and loops).

Same semantics as the vectorised scorers: each keeps per-token lists aligned with the live
tokens, grows them when attention covers more tokens (or keys/positions bring new ones) and
deletes entries on ``on_evict``.  Evidence follows the kvmm convention (attention over all live
tokens, keys/positions of the new tokens).
"""

from __future__ import annotations

import math

import numpy as np

INF = math.inf


class NaiveScorer:
    def __init__(self):
        self.seqs = {}  # seq -> {"n": int, "next": int, "tok": {name: list}, "state": {}}

    def fields(self):
        return ["v"]

    def observe(self, seq, attention=None, keys=None, positions=None, **_):
        st = self.seqs.setdefault(seq, {"seq": seq, "n": 0, "next": 0, "tok": {f: [] for f in self.fields()}, "state": {}})
        if attention is not None:
            a = np.asarray(attention, dtype=float)
            a = a.reshape((1,) * (3 - a.ndim) + a.shape)
            n_new = a.shape[-1] - st["n"]
        elif keys is not None:
            n_new = len(keys)
        elif positions is not None:
            n_new = len(positions)
        else:
            n_new = 0
        if positions is None:
            positions = list(range(st["next"], st["next"] + n_new))
        for f in st["tok"]:
            st["tok"][f] += [self.zero() for _ in range(n_new)]
        st["n"] += n_new
        if n_new:
            st["next"] = int(positions[-1]) + 1
        self.update(st, n_new, a if attention is not None else None, keys, [int(p) for p in positions])

    def zero(self):
        return 0.0

    def on_evict(self, seq, idx):
        st = self.seqs[seq]
        drop = set(int(i) for i in idx)
        for f in st["tok"]:
            st["tok"][f] = [x for i, x in enumerate(st["tok"][f]) if i not in drop]
        st["n"] -= len(drop)

    def scores(self, seq):
        return self.score(self.seqs[seq])


def protect_recent(scores, window):
    n = len(scores)
    return [INF if i >= n - window else s for i, s in enumerate(scores)] if window > 0 else scores


def attention_received(a, j):
    """Sum over heads and queries of the attention token ``j`` received."""
    return sum(a[h][q][j] for h in range(len(a)) for q in range(len(a[h])))


class NaiveH2O(NaiveScorer):
    def __init__(self, recent_window=32):
        super().__init__()
        self.recent = recent_window

    def update(self, st, n_new, a, keys, positions):
        for j in range(st["n"]):
            st["tok"]["v"][j] += attention_received(a, j)

    def score(self, st):
        return protect_recent(list(st["tok"]["v"]), self.recent)


class NaiveScissorhands(NaiveScorer):
    def __init__(self, history_window=8, recent_window=32, threshold=1.0):
        super().__init__()
        self.h, self.recent, self.threshold = history_window, recent_window, threshold

    def zero(self):
        return [0] * self.h

    def fields(self):
        return ["hits"]

    def update(self, st, n_new, a, keys, positions):
        cursor = st["state"].get("cursor", 0)
        n = st["n"]
        cells = len(a) * len(a[0])
        for j in range(n):
            mean = attention_received(a, j) / cells
            st["tok"]["hits"][j][cursor] = 1 if mean >= self.threshold / max(n, 1) else 0
        st["state"]["cursor"] = (cursor + 1) % self.h

    def score(self, st):
        return protect_recent([float(sum(h)) for h in st["tok"]["hits"]], self.recent)


class NaiveSnapKV(NaiveScorer):
    def __init__(self, window_size=32, kernel_size=7, pooling="max"):
        super().__init__()
        self.w, self.k, self.pooling = window_size, kernel_size, pooling

    def update(self, st, n_new, a, keys, positions):
        n = st["n"]
        queries = len(a[0])
        votes = [sum(a[h][q][j] for h in range(len(a)) for q in range(max(queries - self.w, 0), queries))
                 for j in range(n)]
        half = self.k // 2
        pooled = []
        for j in range(n):
            window = votes[max(j - half, 0):j + half + 1]
            pooled.append(max(window) if self.pooling == "max" else sum(window) / len(window))
        st["tok"]["v"] = pooled

    def score(self, st):
        return protect_recent(list(st["tok"]["v"]), self.w)


class NaiveStreamingLLM(NaiveScorer):
    def __init__(self, sink_tokens=4):
        super().__init__()
        self.sinks = sink_tokens

    def update(self, st, n_new, a, keys, positions):
        for i in range(n_new):
            st["tok"]["v"][st["n"] - n_new + i] = float(positions[i])
        if n_new and "first" not in st["state"]:
            st["state"]["first"] = positions[0]

    def score(self, st):
        first = st["state"].get("first", 0)
        return [INF if p < first + self.sinks else p for p in st["tok"]["v"]]


class NaiveKeyNorm(NaiveScorer):
    def update(self, st, n_new, a, keys, positions):
        if not n_new:
            return
        k = np.asarray(keys, dtype=float)
        k = k[:, None, :] if k.ndim == 2 else k
        for i in range(n_new):
            norms = [math.sqrt(sum(float(x) ** 2 for x in k[i][h])) for h in range(k.shape[1])]
            st["tok"]["v"][st["n"] - n_new + i] = -sum(norms) / len(norms)

    def score(self, st):
        return list(st["tok"]["v"])


class NaiveRandom(NaiveScorer):
    def __init__(self, seed=0, recent_window=0):
        super().__init__()
        self.seed = seed
        self.recent = recent_window

    def update(self, st, n_new, a, keys, positions):
        if "rng" not in st["state"]:
            st["state"]["rng"] = np.random.default_rng((self.seed, st["seq"] % 2**63))
        draws = st["state"]["rng"].random(n_new)
        for i in range(n_new):
            st["tok"]["v"][st["n"] - n_new + i] = float(draws[i])

    def score(self, st):
        return protect_recent(list(st["tok"]["v"]), self.recent)


def naive_victims(scores, budget):
    """Indices of the len - budget lowest scores, earlier first on ties (sorted)."""
    order = sorted(range(len(scores)), key=lambda i: (scores[i], i))
    return sorted(order[:max(len(scores) - budget, 0)])
