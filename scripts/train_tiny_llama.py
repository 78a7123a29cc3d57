"""Train kvmm's bundled pydoc-llama model (see kvmm/data/models/pydoc-llama/README.md).

A LlamaForCausalLM from a config (4 layers, hidden 128, 4 heads / 2 KV heads, RoPE theta 10,000,
byte vocabulary 256, context 2,048) trained on the training split of pydoc_data.topics
(kvmm.compress.pydoc_model.corpus_split) for a fixed number of steps with a fixed seed, so the
result does not depend on how fast the machine is.  Writes float16 weights.npz + config.json +
metrics.json to --out.

    OMP_NUM_THREADS=2 nice python scripts/train_tiny_llama.py --out kvmm/data/models/pydoc-llama
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from kvmm.compress.pydoc_model import byte_ids, corpus_split

CONFIG = dict(vocab_size=256, hidden_size=128, intermediate_size=384, num_hidden_layers=4,
              num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=2048,
              rope_theta=10000.0, rms_norm_eps=1e-5, tie_word_embeddings=True, bos_token_id=None,
              eos_token_id=None, pad_token_id=None, attention_bias=False, mlp_bias=False)


def heldout_loss(model, ids: np.ndarray, seq_len: int, windows: int) -> float:
    """Mean next-byte cross-entropy (nats) over ``windows`` evenly spaced held-out windows."""
    starts = np.linspace(0, len(ids) - seq_len - 1, windows).astype(np.int64)
    batch = torch.from_numpy(np.stack([ids[s:s + seq_len + 1] for s in starts]))
    model.eval()
    with torch.no_grad():
        logits = model(input_ids=batch[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))
    model.train()
    return float(loss)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq-len", type=int, default=1024)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    train, heldout = (byte_ids(b) for b in corpus_split())
    config = LlamaConfig(**CONFIG)
    config._attn_implementation = "sdpa"
    model = LlamaForCausalLM(config)
    untrained = heldout_loss(model, heldout, args.seq_len, 8)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1)
    warmup = max(1, args.steps // 20)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(1.0, s / args.steps))))
    began = time.perf_counter()
    for step in range(args.steps):
        starts = rng.integers(0, len(train) - args.seq_len - 1, size=args.batch)
        batch = torch.from_numpy(np.stack([train[s:s + args.seq_len + 1] for s in starts]))
        loss = torch.nn.functional.cross_entropy(
            model(input_ids=batch[:, :-1]).logits.reshape(-1, 256), batch[:, 1:].reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        if step % 10 == 0 or step == args.steps - 1:
            print(f"step {step:4d}  loss {loss.item():.3f}  {time.perf_counter() - began:7.1f}s", flush=True)
    trained = heldout_loss(model, heldout, args.seq_len, 8)
    args.out.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().numpy().astype(np.float16) for k, v in model.state_dict().items() if k != "lm_head.weight"}
    np.savez_compressed(args.out / "weights.npz", **state)
    saved = {k: v for k, v in CONFIG.items()}
    (args.out / "config.json").write_text(json.dumps(saved, indent=1) + "\n")
    metrics = {"seed": args.seed, "steps": args.steps, "batch": args.batch, "seq_len": args.seq_len, "lr": args.lr,
               "train_bytes": int(len(train)), "heldout_bytes": int(len(heldout)),
               "heldout_loss_untrained_nats": round(untrained, 4), "heldout_loss_trained_nats": round(trained, 4),
               "train_seconds": round(time.perf_counter() - began, 1), "threads": args.threads,
               "torch": torch.__version__}
    (args.out / "metrics.json").write_text(json.dumps(metrics, indent=1) + "\n")
    print(json.dumps(metrics, indent=1))


if __name__ == "__main__":
    main()
