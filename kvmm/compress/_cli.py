"""``kvmm calibrate``: TriAttention calibration of a local transformers model.

    kvmm calibrate MODEL_DIR TEXT_FILE --out calibration.npz

Loads the model and tokenizer from a local folder (no download), runs the text through it
once, captures pre-RoPE q and k in every layer, writes the calibration, and prints per layer and
head the Pearson correlation between the predicted mean-logit curve (:func:`logit_curve`, from
the centers alone) and the measured mean logit by distance, plus the query concentration.
``--token-ids`` reads whitespace-separated token ids instead of text (no tokenizer needed).
"""

from __future__ import annotations

import argparse
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", type=Path, help="local transformers model folder (config + weights)")
    parser.add_argument("text", type=Path, help="text file (or token ids with --token-ids)")
    parser.add_argument("--out", type=Path, default=Path("calibration.npz"), help="output .npz (default calibration.npz)")
    parser.add_argument("--token-ids", action="store_true", help="TEXT holds whitespace-separated token ids")
    parser.add_argument("--max-tokens", type=int, default=2048, help="use at most this many tokens (default 2048)")
    parser.add_argument("--max-delta", type=int, default=512,
                        help="largest distance in the Pearson comparison (default 512)")
    parser.add_argument("--dtype", choices=["float32", "float64", "bfloat16"], default="float32",
                        help="dtype to run the model in (default float32)")


def run(args: argparse.Namespace) -> int:
    import numpy as np

    from kvmm.compress.calibration import calibrate, logit_curve, mean_logit_by_distance, pearson
    from kvmm.errors import BadInputError

    if args.max_tokens < 2 or args.max_delta < 1:
        raise BadInputError(f"--max-tokens must be >= 2 and --max-delta >= 1, got {args.max_tokens}, {args.max_delta}")
    if not args.model.is_dir():
        raise BadInputError(f"model folder {args.model} does not exist; expected a save_pretrained folder")
    if not args.text.is_file():
        raise BadInputError(f"text file {args.text} does not exist")
    from kvmm.compress import hf
    import torch
    from transformers import AutoModelForCausalLM

    raw = args.text.read_text(encoding="utf-8")
    if args.token_ids:
        try:
            ids = [int(t) for t in raw.split()]
        except ValueError as exc:
            raise BadInputError(f"{args.text}: --token-ids expects whitespace-separated integers ({exc})") from None
    else:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(args.model, local_files_only=True)
        ids = tokenizer(raw)["input_ids"]
    ids = ids[: args.max_tokens]
    if len(ids) < 2:
        raise BadInputError(f"need at least 2 tokens to calibrate, got {len(ids)}")
    model = AutoModelForCausalLM.from_pretrained(args.model, local_files_only=True,
                                                 dtype=getattr(torch, args.dtype)).eval()
    rope = hf.rope_from_config(model.config)
    pairs = hf.capture_qk(model, np.asarray(ids))
    cal = calibrate([q for q, _ in pairs], [k for _, k in pairs], rope=rope)
    path = cal.save(args.out)
    deltas = np.arange(1, min(args.max_delta, len(ids) - 1) + 1)
    predicted = logit_curve(cal, deltas)
    concentration = cal.head_concentration()
    print(f"calibrated {cal.num_layers} layers x {cal.num_heads} heads (kv {cal.num_kv_heads}, head_dim "
          f"{cal.head_dim}, {rope.layout} layout, {rope.scaling.kind} scaling) on {len(ids)} tokens -> {path}")
    print(f"{'layer':>5} {'head':>4} {'pearson':>8} {'concentration':>13}")
    all_r = []
    for layer, (q, k) in enumerate(pairs):
        measured = mean_logit_by_distance(q, k, rope, deltas)
        r = pearson(predicted[layer], measured)
        all_r.append(r)
        for head in range(cal.num_heads):
            print(f"{layer:>5} {head:>4} {r[head]:>8.3f} {concentration[layer, head]:>13.3f}")
    all_r = np.concatenate(all_r)
    print(f"mean Pearson {np.nanmean(all_r):.3f} (median {np.nanmedian(all_r):.3f}) over distances 1..{deltas[-1]}; "
          f"mean concentration {concentration.mean():.3f}")
    return 0
