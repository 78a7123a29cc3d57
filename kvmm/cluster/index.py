"""The global KV block index: which (instance, medium) holds each block key (docs/cluster_index.md)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from kvmm._validate import MAX_INSTANCES, MAX_UNITS, as_array, as_count, as_index_array
from kvmm.cluster import _index_kernels as K
from kvmm.cluster._index_checks import check_index
from kvmm.cluster._index_snapshot import checked_snapshot
from kvmm.cluster.events import apply_vllm_batch
from kvmm.errors import BadInputError, DTypeError, InvalidIdError, KvmmError, ShapeError, UnknownKeyError

__all__ = ["BlockIndex"]

_I64, _U64 = np.dtype(np.int64), np.dtype(np.uint64)
_SEED = 0x5EED_1DE5  # fixed: the same events give the same arrays in every run
_MIN_CAPACITY = 64


class BlockIndex:
    """Global index of KV blocks over ``num_instances`` instances and named ``media``.

    Answers, for a request's block keys in prefix order, how long a prefix each instance holds
    on each medium (:meth:`prefix_hits`), as llm-d's KV-cache indexer scores pods; fed by
    :meth:`stored` / :meth:`removed` / :meth:`cleared`, their batch forms, or vLLM KV-event
    batches (:meth:`apply_vllm_events`).  Semantics, budget and lossy streams: docs/cluster_index.md.

    ``key_width``: 1 for trace block ids (1-D int64; uint64 taken as its int64 view), 2 for the
    ``(n, 2)`` uint64 keys of :class:`~kvmm.allocators.BlockAllocator`; ``None``: the first
    successful store of a key decides (a lookup or a call that raises decides nothing).
    ``max_entries``: entry budget with LRU eviction.
    ``max_holders``: at most this many (instance, medium) holders per key, the most recently
    stored ones (llm-d's in-memory index keeps 10 pods per key, ``podCacheSize``); ``None``: no cap.

    Layout (structure of arrays, ``capacity`` rows, grown by doubling):

    * ``keys`` (capacity, 2) uint64: the entry's key (word 1 is 0 for ``key_width=1``);
    * ``holders`` (capacity, num_media, words) uint64: a bitset over instances per medium,
      ``words = ceil(num_instances / 64)``, so any number of instances fits;
    * ``links`` (2, capacity) int64: PREV / NEXT of the LRU list (least recently used at the
      head), kept only under a budget (all -1 without one: nothing would read it);
    * ``live`` (capacity,) uint8; ``free_rows`` (capacity,) int64: a stack of unused rows;
    * ``order`` (capacity, max_holders or 0) int64: with a holder cap, each row's holders as
      ``instance x num_media + medium``, oldest first, -1 padded (no columns without a cap);
    * ``table`` (2, 2 x capacity rounded up to a power of two) int64: open addressing with
      linear probing, slot -> (row or -1, the key's 64-bit hash), backward-shift deletion; the
      stored hash spares key reads on probes and rehashing on deletion;
    * ``meta`` int64: entry count, LRU head and tail, free count, table mask, budget, seed and
      the counters of :attr:`stats`.

    Not thread-safe.
    """

    def __init__(self, num_instances: int, media: Sequence[str] = ("GPU", "CPU"), max_entries: int | None = None,
                 *, key_width: int | None = None, max_holders: int | None = None) -> None:
        self.num_instances = as_count(num_instances, "num_instances", minimum=1, maximum=MAX_INSTANCES)
        if isinstance(media, str) or not all(isinstance(m, str) for m in media) or not media:
            raise BadInputError(f"media must be a non-empty sequence of names such as ('GPU', 'CPU'), got {media!r}")
        if len(set(media)) != len(media):
            raise BadInputError(f"media must be distinct names, got {tuple(media)!r}")
        self.media = tuple(media)
        self._medium_ids = {name: m for m, name in enumerate(self.media)}
        self.max_entries = None if max_entries is None else as_count(max_entries, "max_entries", minimum=1, maximum=MAX_UNITS)
        if key_width not in (None, 1, 2):
            raise BadInputError(f"key_width must be 1 (int64 block ids), 2 ((n, 2) uint64 keys) or None, got {key_width!r}")
        self.key_width = key_width
        self.max_holders = None if max_holders is None else as_count(max_holders, "max_holders", minimum=1,
                                                                     maximum=MAX_INSTANCES * len(self.media))
        # small arrays the single calls pass to the kernels, made once (the kernels only read them;
        # the scratch arrays are overwritten by each call): a single call's fixed cost is mostly these
        self._medium_cache: dict = {}  # (medium, groups) -> an int64 array of that medium
        self._spans: dict = {}  # n -> [0, n]
        self._media_one = [np.array([m], dtype=np.int64) for m in range(len(self.media))]  # medium -> [medium]
        self._ones: dict = {}  # instance -> [instance]
        self._scratch_alive = np.empty((len(self.media), (self.num_instances + 63) // 64), dtype=np.uint64)
        self._scratch_rows = np.empty(64, dtype=np.int64)
        self._out_shape = (1, self.num_instances, len(self.media))
        self._scratch_log = np.empty((64, 2), dtype=np.int64)
        self._words = (self.num_instances + 63) // 64
        full = np.zeros(self._words, dtype=np.uint64)
        for i in range(self.num_instances):
            full[i >> 6] |= np.uint64(1) << np.uint64(i & 63)
        self._full = full
        self.meta = np.zeros(K.NUM_META, dtype=np.int64)
        self.meta[[K.M_HEAD, K.M_TAIL]] = -1
        self.meta[K.M_MAX] = -1 if self.max_entries is None else self.max_entries
        self.meta[K.M_SEED] = _SEED
        self.meta[K.M_HOLDER_CAP] = self.max_holders or 0
        self.meta[K.M_INSTANCES] = self.num_instances
        self._allocate(_MIN_CAPACITY if self.max_entries is None else min(_MIN_CAPACITY, self.max_entries))

    # ----------------------------------------------------------------- reading
    def __len__(self) -> int:
        return self.num_entries

    @property
    def num_entries(self) -> int:
        """Keys held by at least one (instance, medium).  Runtime complexity: O(1)."""
        return int(self.meta[K.M_ENTRIES])

    @property
    def capacity(self) -> int:
        return int(self.live.shape[0])

    @property
    def stats(self) -> dict[str, int]:
        """Counters: ``stored`` / ``removed`` (keys), ``lenient_ignored`` (removals of keys not
        held, under lenient replay), ``budget_evictions`` (entries dropped by the budget),
        ``holder_evictions`` (holders dropped by ``max_holders``), ``cleared`` (calls),
        ``lookups`` (requests), ``entries``.  Runtime complexity: O(1)."""
        out = {name: int(self.meta[slot]) for name, slot in K.STAT_SLOTS.items()}
        out["entries"] = self.num_entries
        return out

    def prefix_hits(self, keys: Any) -> np.ndarray:
        """int64 array (num_instances, num_media): for each instance and medium, how many of
        ``keys`` (in prefix order), from the first, it holds consecutively; the run ends at the
        first key it does not hold.  With a budget, the keys of the longest run found are
        touched.  Runtime complexity: O(len(keys) x num_media x words) at most; the scan stops
        once no (instance, medium) holds the whole prefix so far.
        """
        flat = self._keys(keys, "keys")
        n = flat.shape[0]
        out = np.empty(self._out_shape, dtype=np.int64)
        rows = self._scratch_rows if self._scratch_rows.shape[0] >= n else self._grow_rows(n)
        K.prefix_hits_many(self.keys, self.holder_bits, self.links, self.table, self.meta, self._span(n), flat,
                           self._full, out, self._scratch_alive, rows)  # the kernel call inline: the router's hot path
        return out[0]

    def prefix_hits_many(self, offsets: Any, keys: Any) -> np.ndarray:
        """:meth:`prefix_hits` of R requests at once: request r's keys are
        ``keys[offsets[r]:offsets[r + 1]]``; returns int64 (R, num_instances, num_media).
        Equals R calls in order.  Runtime complexity: O(total keys x num_media x words) at most.
        """
        flat = self._keys(keys, "keys")
        return self._prefix_hits(self._offsets(offsets, flat.shape[0]), flat)

    def holders(self, key: Any) -> list[tuple[int, str]]:
        """The (instance, medium name) pairs holding ``key`` (an int, or a pair of words for
        ``key_width=2``), by instance then medium.  Runtime complexity: O(num_instances x media)."""
        if self.key_width == 2 or (self.key_width is None and np.ndim(key) == 1):
            try:
                flat = self._keys(np.array(key, dtype=np.uint64).reshape(1, -1), "key")
            except (OverflowError, ValueError, TypeError):
                raise BadInputError(f"key must be two 64-bit words, got {key!r}") from None
        else:
            flat = self._keys([key], "key")
        row = self._rows(flat)[0]
        return [] if row < 0 else self._holders_of_row(row)

    def as_dict(self) -> dict:
        """Every entry: key (int, or (int, int) for ``key_width=2``) -> :meth:`holders` list.
        Runtime complexity: O(entries x num_instances x media)."""
        return {self._key_value(r): self._holders_of_row(r) for r in np.flatnonzero(self.live)}

    def _holders_of_row(self, row: int) -> list[tuple[int, str]]:
        bits = self.holder_bits[row]
        return [(i, name) for i in range(self.num_instances) for m, name in enumerate(self.media)
                if int(bits[m, i >> 6]) >> (i & 63) & 1]

    def lru_order(self) -> list:
        """Entry keys, least recently used first: the budget's eviction order (empty without a
        budget: no order is kept).  Runtime complexity: O(entries)."""
        out, r = [], int(self.meta[K.M_HEAD])
        while r != -1:
            out.append(self._key_value(r))
            r = int(self.links[K.NEXT, r])
        return out

    # ----------------------------------------------------------------- events
    def stored(self, instance: int, keys: Any, medium: str | int) -> None:
        """Instance ``instance`` now holds ``keys`` on ``medium`` (a name of :attr:`media` or its
        position).  Keys are taken last-first, each made the most recently used entry (under a
        budget a new key may first evict the least recently used entry).
        Runtime complexity: O(len(keys)) expected.
        """
        inst = self._instance(instance)
        m = self._medium(medium)
        flat = self._keys(keys, "keys")
        self._store(self._one(inst), self._media_one[m], self._span(flat.shape[0]), flat)

    def stored_many(self, instances: Any, offsets: Any, keys: Any, media: Any) -> None:
        """Group g: ``stored(instances[g], keys[offsets[g]:offsets[g + 1]], media[g])`` for every
        g in order (``media``: one medium for all groups or one per group).  One kernel call
        per scheduler step.  Runtime complexity: O(total keys) expected.
        """
        inst, meds, offs, flat = self._groups(instances, offsets, keys, media)
        # the kernel call inline (one Python frame less per call); growth, refusal and the first
        # store's key width are handled by _store
        got = K.store_many(self.keys, self.holder_bits, self.links, self.live, self.free_rows, self.table, self.meta,
                           self.order, inst, meds, offs, flat)
        if got or self.key_width is None:
            self._store(inst, meds, offs, flat, (instances, offsets, keys, media), got)

    def removed(self, instance: int, keys: Any, medium: str | int, *, lenient: bool = False) -> None:
        """Instance ``instance`` no longer holds ``keys`` on ``medium``.  A key it does not hold
        (at that point of the call) raises :class:`UnknownKeyError` and nothing changes, unless
        ``lenient``: then it is ignored and counted in ``stats["lenient_ignored"]``.  An entry
        left without holders is dropped.  Runtime complexity: O(len(keys)) expected.
        """
        inst = self._instance(instance)
        m = self._medium(medium)
        flat = self._keys(keys, "keys")
        self._remove(self._one(inst), self._media_one[m], self._span(flat.shape[0]), flat, lenient)

    def removed_many(self, instances: Any, offsets: Any, keys: Any, media: Any, *, lenient: bool = False) -> None:
        """Group g: ``removed(instances[g], keys[offsets[g]:offsets[g + 1]], media[g])`` for
        every g in order; strict: all or nothing.  Runtime complexity: O(total keys) expected."""
        inst, meds, offs, flat = self._groups(instances, offsets, keys, media)
        log = self._scratch_log
        if log.shape[0] < flat.shape[0]:  # the general path grows the scratch log
            self._remove(inst, meds, offs, flat, lenient, (instances, offsets, keys, media))
            return
        got = K.remove_many(self.keys, self.holder_bits, self.links, self.live, self.free_rows, self.table, self.meta,
                            self.order, inst, meds, offs, flat, bool(lenient), log)  # the kernel call inline: one frame less
        if got < 0:
            self._removal_failed(got, inst, meds, offs, flat, (instances, offsets, keys, media))

    def cleared(self, instance: int, medium: str | int | None = None) -> None:
        """Instance ``instance`` holds nothing more on ``medium`` (``None``: on any medium).
        Runtime complexity: O(capacity x num_media)."""
        inst = self._instance(instance)
        meds = np.arange(len(self.media), dtype=np.int64) if medium is None else np.array([self._medium(medium)])
        K.clear_instance(self.keys, self.holder_bits, self.links, self.live, self.free_rows, self.table, self.meta,
                         self.order, inst, meds)

    def apply_vllm_events(self, instance: int, batch: Any, *, lenient: bool = False) -> dict[str, int]:
        """Apply one vLLM ``KVEventBatch`` of instance ``instance``: BlockStored -> :meth:`stored`
        (its ``medium``; none means ``"GPU"``), BlockRemoved -> :meth:`removed`,
        AllBlocksCleared -> :meth:`cleared`.  ``batch``: the msgpack payload (bytes), a JSON
        line (str), the decoded object in either wire shape ``kvmm.traces`` reads, or a msgspec
        struct.  Block hashes map to the int64 view of the 64-bit hash (``key_width`` 1, the
        choice of an undecided index) or ``(hash, 0)``.  Strict: the whole batch or nothing.
        Returns the batch's counts (``stored`` / ``removed`` blocks, ``cleared``,
        ``unknown_events``).  Runtime complexity: O(blocks) (plus O(entries) per clear, and for
        a strict batch where a removal follows another kind of event, see the docs).
        """
        return apply_vllm_batch(self, instance, batch, lenient=lenient)

    # ----------------------------------------------------------------- tests
    def snapshot(self) -> dict[str, np.ndarray]:
        """Copies of every state array (tests compare them before and after a failing call).
        Runtime complexity: O(capacity)."""
        return {"keys": self.keys.copy(), "holders": self.holder_bits.copy(), "links": self.links.copy(),
                "live": self.live.copy(), "free_rows": self.free_rows.copy(), "table": self.table.copy(),
                "meta": self.meta.copy(), "order": self.order.copy(), "key_width": np.array([self.key_width or 0])}

    def restore(self, snap: dict[str, np.ndarray]) -> None:
        """Put back a :meth:`snapshot` of this index (its instances, media and budget).  Every
        array is checked first (names, dtypes, shapes, the invariants between them): a dict that
        is not such a snapshot is a :class:`BadInputError` and nothing changes.
        Runtime complexity: O(capacity x num_media x words + table size)."""
        s = checked_snapshot(self, snap)
        self.keys, self.holder_bits, self.links = s["keys"], s["holders"], s["links"]
        self.live, self.free_rows, self.table, self.meta = s["live"], s["free_rows"], s["table"], s["meta"]
        self.order = s["order"]
        self.key_width = s["key_width"] or None

    def check(self) -> None:
        """Assert every invariant of the arrays.  Expensive (tests).  Runtime complexity:
        O(capacity x num_media x words + table size)."""
        check_index(self)

    # ----------------------------------------------------------------- internals
    def _allocate(self, capacity: int) -> None:
        """Arrays for ``capacity`` rows; the live rows of the old ones (if any) are kept."""
        old = getattr(self, "live", None)
        keys = np.zeros((capacity, 2), dtype=np.uint64)
        holders = np.zeros((capacity, len(self.media), self._words), dtype=np.uint64)
        links = np.full((2, capacity), -1, dtype=np.int64)
        live = np.zeros(capacity, dtype=np.uint8)
        size = 1 << max(2 * capacity - 1, 1).bit_length()
        table = np.zeros((2, size), dtype=np.int64)
        table[0] = -1
        start = 0 if old is None else old.shape[0]
        order = np.full((capacity, self.max_holders or 0), -1, dtype=np.int64)
        if old is not None:  # rows keep their numbers, so the LRU links stay valid
            keys[:start], holders[:start], links[:, :start], live[:start] = self.keys, self.holder_bits, self.links, old
            order[:start] = self.order
        # Free stack (top = last): the old free rows stay at the bottom, the new rows go above, lowest on top.
        num_free = 0 if old is None else int(self.meta[K.M_FREE])
        free_rows = np.zeros(capacity, dtype=np.int64)
        if old is not None:
            free_rows[:num_free] = self.free_rows[:num_free]
        free_rows[num_free:num_free + capacity - start] = np.arange(capacity - 1, start - 1, -1)
        self.keys, self.holder_bits, self.links, self.live, self.table = keys, holders, links, live, table
        self.free_rows, self.order = free_rows, order
        self.meta[K.M_FREE] = num_free + capacity - start
        self.meta[K.M_MASK] = size - 1
        K.rebuild_table(self.keys, self.live, self.table, self.meta)

    def _reserve(self, new_keys: int) -> None:
        """Grow so that ``new_keys`` more entries (up to the budget) have rows."""
        need = self.num_entries + new_keys
        if self.max_entries is not None:
            need = min(need, self.max_entries)
        if need > self.capacity:
            cap = self.capacity
            while cap < need:
                cap *= 2
            self._allocate(cap if self.max_entries is None else min(cap, self.max_entries))

    def _store(self, inst, meds, offs, flat, named=None, got=None) -> None:
        """One kernel call (two when the arrays must grow first; ``got``: the first call's result
        when the caller made it).  ``named``: the call's own arguments, for :meth:`_groups_named`
        to name the fault when the kernel refuses them."""
        if got is None:
            got = K.store_many(self.keys, self.holder_bits, self.links, self.live, self.free_rows, self.table,
                               self.meta, self.order, inst, meds, offs, flat)
        if got == K.GROW:
            self._reserve(flat.shape[0])
            got = K.store_many(self.keys, self.holder_bits, self.links, self.live, self.free_rows, self.table,
                               self.meta, self.order, inst, meds, offs, flat)
        if got == K.INVALID:
            self._groups_named(*named)
            raise AssertionError(f"BlockIndex: a batch the kernel refused passed every check: {named!r:.200}")
        if self.key_width is None and flat.shape[0]:
            self.key_width = flat.shape[1]  # the call succeeded: the first store decides

    def _remove(self, inst, meds, offs, flat, lenient: bool, named=None) -> None:
        log = self._scratch_log
        if log.shape[0] < flat.shape[0]:
            log = self._scratch_log = np.empty((max(flat.shape[0], 2 * log.shape[0]), 2), dtype=np.int64)
        got = K.remove_many(self.keys, self.holder_bits, self.links, self.live, self.free_rows, self.table, self.meta,
                            self.order, inst, meds, offs, flat, bool(lenient), log)
        if got < 0:
            self._removal_failed(got, inst, meds, offs, flat, named)

    def _removal_failed(self, got: int, inst, meds, offs, flat, named) -> None:
        """Raise the error a refused removal kernel call (nothing changed) stands for."""
        if got == K.INVALID:
            self._groups_named(*named)
            raise AssertionError(f"BlockIndex: a batch the kernel refused passed every check: {named!r:.200}")
        if got < 0:
            j = -got - 1
            g = int(np.searchsorted(offs, j, side="right")) - 1
            raise UnknownKeyError(f"instance {int(inst[g])} does not hold key {self._flat_value(flat, j)!r} (key {j} of "
                                  f"the call) on medium {self.media[int(meds[g])]!r}; expected keys it stored and has "
                                  "not removed since (pass lenient=True to ignore such removals in a lossy stream)")

    def _prefix_hits(self, offs, flat) -> np.ndarray:
        out = np.empty((offs.shape[0] - 1, self.num_instances, len(self.media)), dtype=np.int64)
        rows = self._scratch_rows if self._scratch_rows.shape[0] >= flat.shape[0] else self._grow_rows(flat.shape[0])
        K.prefix_hits_many(self.keys, self.holder_bits, self.links, self.table, self.meta, offs, flat, self._full, out,
                           self._scratch_alive, rows)
        return out

    def _grow_rows(self, n: int) -> np.ndarray:
        rows = self._scratch_rows = np.empty(max(n, 2 * self._scratch_rows.shape[0]), dtype=np.int64)
        return rows

    def _one(self, instance: int) -> np.ndarray:
        arr = self._ones.get(instance)
        if arr is None:
            arr = self._ones[instance] = np.array([instance], dtype=np.int64)
        return arr

    def _span(self, n: int) -> np.ndarray:
        """``[0, n]``: the offsets of one group of ``n`` keys (cached: the kernels only read them)."""
        arr = self._spans.get(n)
        if arr is None:
            if len(self._spans) > 256:
                self._spans.clear()
            arr = self._spans[n] = np.array([0, n], dtype=np.int64)
        return arr

    def _rows(self, flat) -> np.ndarray:
        out = np.empty(flat.shape[0], dtype=np.int64)
        K.find_rows(self.keys, self.table, self.meta, flat, out)
        return out

    def _key_value(self, r: int):
        return self._flat_value(self.keys[r:r + 1, :self.key_width or 1], 0)

    def _flat_value(self, flat, j: int):
        if flat.shape[1] == 2:
            return int(flat[j, 0]), int(flat[j, 1])
        return int(flat[j:j + 1, 0].view(np.int64)[0])

    # ----------------------------------------------------------------- validation
    def _instance(self, instance: Any) -> int:
        if type(instance) is not int:
            instance = as_count(instance, "instance", minimum=-2**63)
        if not 0 <= instance < self.num_instances:
            raise InvalidIdError(f"instance {instance} is out of range; expected an instance in [0, {self.num_instances})")
        return instance

    def _medium(self, medium: Any) -> int:
        m = self._medium_ids.get(medium) if isinstance(medium, str) else None
        if m is None:
            if (isinstance(medium, (int, np.integer)) and not isinstance(medium, (bool, np.bool_))
                    and 0 <= medium < len(self.media)):
                return int(medium)
            raise BadInputError(f"unknown medium {medium!r}; expected one of {list(self.media)} (or its position)")
        return m

    def _keys(self, keys: Any, name: str) -> np.ndarray:
        """``keys`` as a contiguous (n, 1) or (n, 2) uint64 array, of this index's key width once
        decided: a view of a contiguous int64 / uint64 array (the kernels only read it), else a copy."""
        if type(keys) is np.ndarray and (keys.dtype == _I64 or keys.dtype == _U64) and keys.flags.c_contiguous:
            if keys.ndim == 1 and self.key_width != 2:
                return keys.view(_U64)[:, None]  # (n, 1), C-contiguous (its one column)
            if keys.ndim == 2 and keys.shape[1] == 2 and keys.dtype == _U64 and self.key_width != 1:
                return keys
        try:
            arr = as_array(keys, name)
        except OverflowError:
            raise BadInputError(f"{name} holds a value that does not fit 64 bits; expected 64-bit keys") from None
        if arr.dtype.kind not in "iu":
            if arr.size == 0 and arr.dtype.kind == "f":  # [] arrives as float64
                arr = arr.astype(np.int64)
            elif arr.dtype == object and all(type(v) is int for v in arr.flat):
                raise BadInputError(f"{name} holds a value outside [-2**63, 2**64) or mixes negative ids with ones "
                                    "above 2**63; expected 64-bit keys (does not fit 64 bits)")
            else:
                raise DTypeError(f"{name} must hold integer keys (int64 block ids or (n, 2) uint64 keys), got dtype "
                                 f"{arr.dtype}")
        width = 1 if arr.ndim == 1 else 2 if arr.ndim == 2 and arr.shape[1] == 2 else 0
        if width == 0:
            raise ShapeError(f"{name} must be a 1-D array of block ids or an (n, 2) array of keys, got shape {arr.shape}")
        if self.key_width is not None and width != self.key_width and arr.size:
            kind = "a 1-D array of int64 block ids" if self.key_width == 1 else "an (n, 2) uint64 array"
            raise ShapeError(f"{name} has shape {arr.shape}, but this index holds key_width={self.key_width} keys: "
                             f"expected {kind}")
        if width == 1:
            flat = (arr.astype(np.int64) if arr.dtype.kind == "i" else arr.astype(np.uint64)).view(np.uint64)
            flat = np.ascontiguousarray(flat).reshape(-1, 1).copy()
        else:
            flat = np.ascontiguousarray(arr.astype(np.uint64, copy=True))
        return flat

    def _offsets(self, offsets: Any, n: int) -> np.ndarray:
        offs = as_index_array(offsets, "offsets")
        if offs.shape[0] < 1 or offs[0] != 0 or offs[-1] != n or (offs.shape[0] > 1 and np.any(np.diff(offs) < 0)):
            raise BadInputError(f"offsets must rise from 0 to the number of keys ({n}), one more than the number of "
                                f"groups; got {offs.tolist()[:8]}{'...' if offs.shape[0] > 8 else ''}")
        return offs

    def _groups(self, instances: Any, offsets: Any, keys: Any, media: Any):
        """Validated ``(instances, media, offsets, keys)`` of a batch call.  The common case
        (integer arrays or lists, one medium or a list of names) is checked by one kernel
        call, so a batch of one group costs no more than the single call; any fault is then
        found and named by :meth:`_groups_named`, in the order it checks."""
        # an int64 vector as is (a strided one compiles the kernels' 'A'-layout variant once)
        inst = instances if type(instances) is np.ndarray and instances.dtype == _I64 and instances.ndim == 1 \
            else _int64_vector(instances)
        offs = offsets if type(offsets) is np.ndarray and offsets.dtype == _I64 and offsets.ndim == 1 \
            else _int64_vector(offsets)
        if inst is not None and offs is not None:
            ids, kind, meds = self._medium_ids, type(media), None
            if kind is str:
                m = ids.get(media)
                meds = None if m is None else self._media_of(m, inst.shape[0])
            elif kind is list or kind is tuple:
                if len(media) == 1:  # one group: a cached array
                    m = ids.get(media[0]) if type(media[0]) is str else None
                    meds = None if m is None else self._media_one[m]
                elif all(type(m) is str for m in media):
                    meds = np.array([ids.get(m, -1) for m in media], dtype=np.int64)  # -1: the kernel refuses it
            elif kind is np.ndarray:
                meds = _int64_vector(media)
            if meds is not None:
                if type(keys) is np.ndarray and keys.dtype == _I64 and keys.ndim == 1 and self.key_width != 2 \
                        and keys.flags.c_contiguous:  # _keys' common case inline: a batch of one group is hot
                    return inst, meds, offs, keys.view(_U64)[:, None]
                try:
                    return inst, meds, offs, self._keys(keys, "keys")
                except KvmmError:
                    pass  # named in the order of the checks below
        return self._groups_named(instances, offsets, keys, media)

    def _media_of(self, m: int, groups: int) -> np.ndarray:
        """An int64 array of ``groups`` copies of medium ``m``, cached (the kernels never write
        it; a read-only flag would compile a second variant of every kernel)."""
        arr = self._medium_cache.get((m, groups))
        if arr is None:
            if len(self._medium_cache) > 64:
                self._medium_cache.clear()
            arr = self._medium_cache[(m, groups)] = np.full(groups, m, dtype=np.int64)
        return arr

    def _groups_named(self, instances: Any, offsets: Any, keys: Any, media: Any):
        """:meth:`_groups`'s checks one by one: the first fault raises, named."""
        inst = as_index_array(instances, "instances")
        if inst.size and (inst.min() < 0 or inst.max() >= self.num_instances):
            bad = int(inst[(inst < 0) | (inst >= self.num_instances)][0])
            raise InvalidIdError(f"instances contains {bad}; expected instances in [0, {self.num_instances})")
        if isinstance(media, (str, int, np.integer)):
            meds = np.full(inst.shape[0], self._medium(media), dtype=np.int64)
        elif isinstance(media, (list, tuple, np.ndarray)) and np.ndim(media) == 1:
            meds = np.array([self._medium(m) for m in media], dtype=np.int64)
        else:
            raise DTypeError(f"media must be one medium (a name of {list(self.media)} or its position) or a list "
                             f"with one per group, got {type(media).__name__}")
        if meds.shape[0] != inst.shape[0]:
            raise ShapeError(f"media must be one medium or one per group ({inst.shape[0]}), got {meds.shape[0]}")
        flat = self._keys(keys, "keys")
        offs = self._offsets(offsets, flat.shape[0])
        if offs.shape[0] != inst.shape[0] + 1:
            raise ShapeError(f"offsets must have one more entry than instances ({inst.shape[0] + 1}), got {offs.shape[0]}")
        return inst, meds, offs, flat


def _int64_vector(x: Any) -> np.ndarray | None:
    """``x`` as a contiguous 1-D int64 array when it already is one (as is) or is a non-empty
    list of ints; None otherwise (the named checks then convert or refuse it)."""
    if type(x) is np.ndarray:
        return x if x.dtype == np.int64 and x.ndim == 1 and x.flags.c_contiguous else None
    if type(x) is list and x:
        for v in x:
            if type(v) is not int:
                return None
        try:
            return np.array(x, dtype=np.int64)
        except OverflowError:
            return None
    return None
