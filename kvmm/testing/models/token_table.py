"""Plain-Python reference of ``kvmm.allocators.TokenTable`` (same semantics, dicts and lists).

Slow and obviously correct: each sequence is a dict with a list of slots per logical token
(-1 = dead) and a list of blocks; blocks and slots are dicts.  The planner follows the same
rules as the numba kernel (keep the ``ceil(live / block_size)`` densest movable blocks, take the
cheapest blocks across sequences first within the budget, then densify the partial block), so
the tests compare plans move by move.  Written from the documented behaviour (docs/vtoken.md,
the TokenTable docstrings).  The model of :class:`kvmm.testing.TokenTableMachine` and the
same-run baseline of the benchmarks.  Works with ``BlockAllocator`` or ``NaiveBlockAllocator``.
"""

from __future__ import annotations


class NaiveTokenTable:
    def __init__(self, allocator) -> None:
        self.alloc = allocator
        self.bs = allocator.block_size
        self.seqs: dict[int, dict] = {}  # seq id -> {"row", "inc", "first", "tok": [...], "blocks": [...]}
        self.rows: dict[int, int] = {}  # row -> seq id
        self.free_rows: list[int] = []
        self.num_rows = 0
        self.next_inc = 1
        self.owner: dict[int, int] = {}  # owned block -> row
        self.shared: dict[int, int] = {}  # shared block -> holders
        self.live: dict[int, int] = {}
        self.fill: dict[int, int] = {}
        self.at: dict[int, int] = {}  # occupied slot (owned blocks) -> logical

    def _refs(self, b: int) -> int:
        ref = self.alloc.ref if hasattr(self.alloc, "ref") else self.alloc.ref_counts
        return int(ref[b])

    # -- sequences
    def add_sequence(self, seq: int, shared_blocks=(), first_position: int = 0) -> None:
        assert seq not in self.seqs
        shared = [int(b) for b in shared_blocks]
        if shared:
            self.alloc.touch(shared)
        row = self.free_rows.pop() if self.free_rows else self._new_row()
        self.rows[row] = seq
        tok = []
        for b in shared:
            if b in self.owner:  # an owned, full block becomes read-only for its owner too
                for o in range(self.bs):
                    self.at.pop(b * self.bs + o, None)
                del self.owner[b]
                self.shared[b] = 1
            self.shared[b] = self.shared.get(b, 0) + 1
            tok += [b * self.bs + o for o in range(self.bs)]
        self.seqs[seq] = {"row": row, "inc": self.next_inc, "first": first_position, "tok": tok, "blocks": list(shared)}
        self.next_inc += 1

    def _new_row(self) -> int:
        self.num_rows += 1
        return self.num_rows - 1

    def free_sequence(self, seq: int) -> None:
        s = self.seqs.pop(seq)
        self.alloc.free(list(reversed(s["blocks"])))
        for b in s["blocks"]:
            if self.owner.get(b) == s["row"]:
                for o in range(self.bs):
                    self.at.pop(b * self.bs + o, None)
                del self.owner[b]
                self.live.pop(b, None)
                self.fill.pop(b, None)
            else:
                self.shared[b] -= 1
                if self.shared[b] == 0:
                    del self.shared[b]
        del self.rows[s["row"]]
        self.free_rows.append(s["row"])

    def append(self, seq_ids, counts) -> list[int]:
        out = []
        for seq, c in zip(seq_ids, counts):
            s = self.seqs[int(seq)]
            row = s["row"]
            for _ in range(int(c)):
                tail = s["blocks"][-1] if s["blocks"] else None
                if tail is None or self.owner.get(tail) != row or self.fill[tail] == self.bs:
                    (tail,) = [int(x) for x in self.alloc.allocate(1)]
                    s["blocks"].append(tail)
                    self.owner[tail] = row
                    self.live[tail] = 0
                    self.fill[tail] = 0
                slot = tail * self.bs + self.fill[tail]
                self.fill[tail] += 1
                self.live[tail] += 1
                self.at[slot] = len(s["tok"])
                s["tok"].append(slot)
                out.append(slot)
        return out

    def evict(self, seq: int, positions) -> None:
        s = self.seqs[seq]
        for p in positions:
            slot = s["tok"][int(p)]
            assert slot >= 0
            s["tok"][int(p)] = -1
            b = slot // self.bs
            if self.owner.get(b) == s["row"]:
                del self.at[slot]
                self.live[b] -= 1

    # -- views
    def block_table(self, seq: int) -> list[int]:
        return list(self.seqs[seq]["blocks"])

    def context_length(self, seq: int) -> int:
        """1 + the index of the last live token in the concatenation of the sequence's blocks, or 0."""
        s = self.seqs[seq]
        return max((s["blocks"].index(slot // self.bs) * self.bs + slot % self.bs + 1
                    for slot in s["tok"] if slot >= 0), default=0)

    def slot_mapping(self, seq: int) -> list[int]:
        return [x for x in self.seqs[seq]["tok"] if x >= 0]

    def positions(self, seq: int) -> list[int]:
        s = self.seqs[seq]
        return [i + s["first"] for i, x in enumerate(s["tok"]) if x >= 0]

    # -- repacking
    def _candidates(self, seq: int):
        s = self.seqs[seq]
        row = s["row"]
        blocks = s["blocks"]
        movable = [(j, b) for j, b in enumerate(blocks) if self.owner.get(b) == row and self._refs(b) == 1]
        movable.sort(key=lambda jb: (self.live[jb[1]], -jb[0]))  # sparsest first, later first on ties
        live = sum(self.live[b] for _, b in movable)
        keep = -(-live // self.bs)
        return movable, keep, live

    def plan(self, budget: int | None = None) -> dict:
        by_row = sorted((s["row"], seq) for seq, s in self.seqs.items())
        cands = []
        n_cands = {}
        for row, seq in by_row:
            movable, keep, _ = self._candidates(seq)
            n_cands[row] = len(movable) - keep
            for rank in range(len(movable) - keep):
                b = movable[rank][1]
                cands.append((self.live[b], rank, row, b))
        cands.sort()
        taken = {row: 0 for row, _ in by_row}
        spent = 0
        for cost, _, row, _ in cands:
            if budget is not None and spent + cost > budget:
                break
            spent += cost
            taken[row] += 1
        plan = {"src": [], "dst": [], "seq": [], "logical": [], "free": [], "tails": [], "min_moves": spent}
        for row, seq in by_row:
            movable, keep, live = self._candidates(seq)
            full = taken[row] == len(movable) - keep
            if taken[row] == 0 and not full:
                continue
            kept = [j for j, _ in movable[len(movable) - keep:]]
            blocks = self.seqs[seq]["blocks"]
            rem = live - (keep - 1) * self.bs
            t_pos, extra = None, 0
            if keep > 0:
                def high(j):
                    b = blocks[j]  # noqa: B023 (called at once, inside the loop)
                    return sum(1 for o in range(rem, self.bs) if b * self.bs + o in self.at)  # noqa: B023 (as above)
                t_pos = min(sorted(kept, reverse=True), key=high)  # fewest high tokens; later wins ties
                extra = high(t_pos)
            densify = full and t_pos is not None and (budget is None or spent + extra <= budget)
            if densify:
                spent += extra
            sources = []
            for rank in range(taken[row]):
                b = movable[rank][1]
                plan["free"].append((b, seq))
                sources += [b * self.bs + o for o in range(self.bs) if b * self.bs + o in self.at]
            if densify:
                b = blocks[t_pos]
                sources += [b * self.bs + o for o in range(rem, self.bs) if b * self.bs + o in self.at]
                plan["tails"].append((b, seq))
            holes = [blocks[j] * self.bs + o for j in sorted(kept) if j != t_pos for o in range(self.bs)
                     if blocks[j] * self.bs + o not in self.at]
            if t_pos is not None:
                holes += [blocks[t_pos] * self.bs + o for o in range(rem) if blocks[t_pos] * self.bs + o not in self.at]
            for src, dst in zip(sources, holes):
                plan["src"].append(src)
                plan["dst"].append(dst)
                plan["seq"].append((seq, self.seqs[seq]["inc"]))
                plan["logical"].append(self.at[src])
        return plan

    def commit(self, plan: dict) -> tuple[list[bool], list[int]]:
        valid = []
        for src, dst, (seq, inc), logical in zip(plan["src"], plan["dst"], plan["seq"], plan["logical"]):
            s = self.seqs.get(seq)
            row = s["row"] if s else None
            ok = (s is not None and s["inc"] == inc and logical < len(s["tok"]) and s["tok"][logical] == src
                  and self.at.get(src) == logical and dst not in self.at
                  and self.owner.get(src // self.bs) == row and self.owner.get(dst // self.bs) == row
                  and self._refs(src // self.bs) == 1 and self._refs(dst // self.bs) == 1)
            valid.append(ok)
        for ok, src, dst, (seq, _), logical in zip(valid, plan["src"], plan["dst"], plan["seq"], plan["logical"]):
            if ok:
                self.seqs[seq]["tok"][logical] = dst
                del self.at[src]
                self.at[dst] = logical
                self.live[src // self.bs] -= 1
                self.live[dst // self.bs] += 1
                self.fill[dst // self.bs] = max(self.fill[dst // self.bs], dst % self.bs + 1)
        freed = []
        for b, seq in plan["free"]:
            s = self.seqs.get(seq)
            if s and self.owner.get(b) == s["row"] and self.live[b] == 0 and self._refs(b) == 1:
                s["blocks"].remove(b)
                del self.owner[b]
                del self.live[b]
                del self.fill[b]
                freed.append(b)
        for b, seq in plan["tails"]:
            s = self.seqs.get(seq)
            if s and self.owner.get(b) == s["row"]:
                s["blocks"].remove(b)
                s["blocks"].append(b)
                self.fill[b] = max([o + 1 for o in range(self.bs) if b * self.bs + o in self.at], default=0)
        if freed:
            self.alloc.free(freed)
        return valid, freed
