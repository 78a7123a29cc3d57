"""The numba replay kernel of each eviction order, one module per order (``classic`` holds LRU
and FIFO), each named by its row of :data:`~kvmm.policies.eviction.orders.ORDERS` and loaded by
:func:`~kvmm.policies.replay` on first use.

Their lists are their own, not the shared list primitives of :mod:`kvmm._kernels` (which the
allocator and the cluster index use): numba keeps the reference counting of every array an
inlined helper call is passed in these runtime-managed loops, and the shared ``list_unlink`` /
``list_link_after`` made the LRU and FIFO replay 1.2-3x slower, measured in one process against
the inline code (Zipf 0.9, 2 M references, capacities 1000 and 20000).  Each kernel keeps a key's
links in its own node row, or in one or two arrays, for the same reason.  The prefetch intrinsic
is shared; the hash of W-TinyLFU's sketch is libCacheSim's (XXH64), not :func:`kvmm._kernels.mix64`.
"""
