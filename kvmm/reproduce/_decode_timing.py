"""CPU decode-step time with a full vs a 10x-compressed KV cache (part of the TriAttention section).

Two measurements per context length ``n`` (cache of ``n`` tokens vs ``n // 10``), each repeated
``REPEATS`` times (one repetition = the mean of ``calls`` timed calls after warm-up), reported as
mean ± std over the repetitions:

* **attention kernel**: ``torch.nn.functional.scaled_dot_product_attention`` of one decode query
  over the cached K/V, with the head shapes of a Llama-3-8B-class layer (32 query heads, 8 KV
  heads, head_dim 128), float32;
* **whole decode step** of the bundled pydoc-llama model (every layer, MLPs, sampling head) with
  a transformers ``DynamicCache`` filled with ``n`` random K/V entries.

The paper's 2.5x is end-to-end serving throughput on GPUs (large batches); this is one decode
query on one CPU, printed beside the claim as measured, not as a reproduction of it.
"""

from __future__ import annotations

import inspect
import time

import numpy as np

from kvmm.report import mean_pm

REPEATS = 5
COMPRESSION = 10
BIG_HEADS = (32, 8, 128)  # query heads, KV heads, head_dim (Llama-3-8B-class layer)


def report_decode_timing(report, model, *, quick: bool, claim: str) -> None:
    import torch

    lengths = (1024, 4096) if quick else (2048, 8192, 32768)
    calls = 5 if quick else 20
    rows = []
    with report.progress(len(lengths) * 2, "decode timing") as bar:
        for n in lengths:
            for label, fn in (("attention kernel (32/8 heads x 128, one layer)", _time_kernel),
                              ("whole decode step (pydoc-llama)", _time_model_step)):
                full, small, ratio = fn(torch, model, n, calls)
                rows.append([label, n, n // COMPRESSION, _ms(full), _ms(small),
                             mean_pm(ratio, ".2f", unit="x"), claim])
                bar.update(1)
    report.table(
        f"Decode-step time on this CPU, full vs {COMPRESSION}x-compressed KV cache",
        ["measured", "context", "compressed to", "full ms", "compressed ms", "speed-up", "paper"],
        rows,
        note=f"mean ± std over {REPEATS} repetitions of {calls} timed calls each (after warm-up), torch "
             f"{torch.__version__}, {torch.get_num_threads()} threads. Not the paper's measurement: the paper's 2.5x is "
             "end-to-end GPU serving throughput (batched); here one decode query on this CPU, with the time of the "
             "attention kernel alone and of the small model's whole step. On a shared machine the spread is large.")


def _time_kernel(torch, model, n, calls):
    heads, kv_heads, d = BIG_HEADS
    gen = torch.Generator().manual_seed(n)
    q = torch.randn(1, heads, 1, d, generator=gen)

    def kernel(length):
        k = torch.randn(1, kv_heads, length, d, generator=gen).repeat_interleave(heads // kv_heads, dim=1)
        v = torch.randn(1, kv_heads, length, d, generator=gen).repeat_interleave(heads // kv_heads, dim=1)
        return lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v)

    return _compare(kernel(n), kernel(n // COMPRESSION), calls)


def _time_model_step(torch, model, n, calls):
    from transformers import DynamicCache

    config = model.config
    kv_heads = config.num_key_value_heads
    d = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    cache_arg = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    gen = torch.Generator().manual_seed(n)
    token = torch.tensor([[65]])

    def step(length):
        cache = DynamicCache(config=config)
        for layer in range(config.num_hidden_layers):
            cache.update(torch.randn(1, kv_heads, length, d, generator=gen),
                         torch.randn(1, kv_heads, length, d, generator=gen), layer)
        position = torch.tensor([[length]])

        def call():
            with torch.no_grad():
                model(input_ids=token, position_ids=position, use_cache=True, **{cache_arg: cache})
            cache.crop(-1)  # drop the token just appended: every call sees the same cache

        return call

    return _compare(step(n), step(n // COMPRESSION), calls)


def _compare(full_fn, small_fn, calls):
    """Per repetition: mean seconds per call of each, and their ratio (full / compressed)."""
    for fn in (full_fn, small_fn):
        for _ in range(3):
            fn()  # warm-up
    full, small = [], []
    for _ in range(REPEATS):
        for fn, out in ((full_fn, full), (small_fn, small)):
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            out.append((time.perf_counter() - t0) / calls)
    full, small = np.array(full), np.array(small)
    return full, small, full / small


def _ms(seconds):
    return mean_pm(seconds, scale=1e3)
