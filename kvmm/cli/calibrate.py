"""``kvmm calibrate``: TriAttention calibration of a local transformers model.

    kvmm calibrate MODEL_DIR TEXT_FILE --out calibration.npz

Loads the model and tokenizer from a local folder (no download), runs the text through it
once and captures pre-RoPE q and k in every layer.  The first ``--calibration-fraction`` of the
tokens (default half) calibrates; the rest is held out.  Writes the calibration and prints per
layer and head the Pearson correlation between the predicted mean-logit curve
(:func:`logit_curve`, from the centers alone) and the measured mean logit by distance, both in
sample (measured on the calibration part) and out of sample (on the held-out part), plus the
query concentration.
``--token-ids`` reads whitespace-separated token ids instead of text (no tokenizer needed).
kvmm's own model folder (``kvmm/data/models/pydoc-llama``: ``config.json`` plus ``weights.npz``,
byte-level vocabulary) is read with :func:`kvmm.compress.pydoc_model.load_model` and tokenized
one token per UTF-8 byte.

The optional hf extra (torch, transformers, and :mod:`kvmm.compress.hf` built on them) is
imported when the command runs.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from kvmm.compress.calibration import calibrate, logit_curve, mean_logit_by_distance, pearson
from kvmm.compress.pydoc_model import byte_ids, load_model
from kvmm.errors import BadInputError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", type=Path, help="local transformers model folder (config + weights)")
    parser.add_argument("text", type=Path, help="text file (or token ids with --token-ids)")
    parser.add_argument("--out", type=Path, default=Path("calibration.npz"), help="output .npz (default calibration.npz)")
    parser.add_argument("--token-ids", action="store_true", help="TEXT holds whitespace-separated token ids")
    parser.add_argument("--max-tokens", type=int, default=2048, help="use at most this many tokens (default 2048)")
    parser.add_argument("--max-delta", type=int, default=512,
                        help="largest distance in the Pearson comparison (default 512)")
    parser.add_argument("--calibration-fraction", type=float, default=0.5,
                        help="share of the tokens that calibrates; the rest measures Pearson out of sample "
                             "(default 0.5; 1.0: in sample only)")
    parser.add_argument("--dtype", choices=["float32", "float64", "bfloat16"], default="float32",
                        help="dtype to run the model in (default float32)")


def run(args: argparse.Namespace) -> int:
    if args.max_tokens < 2 or args.max_delta < 1:
        raise BadInputError(f"--max-tokens must be >= 2 and --max-delta >= 1, got {args.max_tokens}, {args.max_delta}")
    if not 0.0 < args.calibration_fraction <= 1.0:
        raise BadInputError(f"--calibration-fraction must be in (0, 1], got {args.calibration_fraction}")
    if not args.model.is_dir():
        raise BadInputError(f"model folder {args.model} does not exist; expected a save_pretrained folder")
    if not args.text.is_file():
        raise BadInputError(f"text file {args.text} does not exist")
    # the optional hf extra: torch, transformers, and kvmm.compress.hf built on them
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from kvmm.compress import hf  # (needs torch)

    bundled = (args.model / "weights.npz").is_file()  # kvmm's own format (pydoc_model), not save_pretrained's
    try:
        raw = args.text.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise BadInputError(f"text file {args.text} is not UTF-8 (byte {exc.start}); expected UTF-8 text") from None
    if args.token_ids:
        try:
            ids = [int(t) for t in raw.split()]
        except ValueError as exc:
            raise BadInputError(f"{args.text}: --token-ids expects whitespace-separated integers ({exc})") from None
    elif bundled:
        ids = byte_ids(raw.encode("utf-8")).tolist()  # its vocabulary: one token per UTF-8 byte
    else:
        try:
            tokenizer = AutoTokenizer.from_pretrained(args.model, local_files_only=True)
        except (OSError, ValueError, TypeError, KeyError, ImportError) as exc:  # transformers' many ways to say "none"
            first = (str(exc).strip().splitlines() or [""])[0].rstrip(": ") or type(exc).__name__
            raise BadInputError(f"cannot load a tokenizer from {args.model} ({first}); give token ids instead "
                                f"with --token-ids (TEXT then holds whitespace-separated ids)") from None
        ids = tokenizer(raw)["input_ids"]
    ids = ids[: args.max_tokens]
    n_cal = round(args.calibration_fraction * len(ids))  # <= len(ids): the fraction is at most 1
    if n_cal < 2:
        raise BadInputError(f"need at least 2 calibration tokens, got {len(ids)} tokens x "
                            f"--calibration-fraction {args.calibration_fraction}")
    if bundled:
        model = load_model(args.model).to(getattr(torch, args.dtype)).eval()
    else:
        try:
            model = AutoModelForCausalLM.from_pretrained(args.model, local_files_only=True,
                                                         dtype=getattr(torch, args.dtype)).eval()
        except (OSError, ValueError, TypeError, KeyError) as exc:  # transformers' many ways to say "not a model"
            first = (str(exc).strip().splitlines() or [""])[0].rstrip(": ") or type(exc).__name__
            raise BadInputError(f"cannot load a transformers model from {args.model} ({first[:200]}); expected a "
                                "save_pretrained folder (config.json with model_type, and weights)") from None
    rope = hf.rope_from_config(model.config)
    pairs = hf.capture_qk(model, np.asarray(ids))
    cal = calibrate([q[:n_cal] for q, _ in pairs], [k[:n_cal] for _, k in pairs], rope=rope)
    path = cal.save(args.out)
    held = len(ids) - n_cal
    print(f"calibrated {cal.num_layers} layers x {cal.num_heads} heads (kv {cal.num_kv_heads}, head_dim "
          f"{cal.head_dim}, {rope.layout} layout, {rope.scaling.kind} scaling) on the first {n_cal} of {len(ids)} "
          f"tokens -> {path}")
    parts = {"in sample": (0, n_cal)}
    if held >= 2:
        parts["out of sample"] = (n_cal, len(ids))
    longest = min(n_cal, held if held >= 2 else n_cal) - 1
    deltas = np.arange(1, max(1, min(args.max_delta, longest)) + 1)
    predicted = logit_curve(cal, deltas)
    concentration = cal.head_concentration()
    r = {name: np.stack([pearson(predicted[layer], mean_logit_by_distance(q[lo:hi], k[lo:hi], rope, deltas))
                         for layer, (q, k) in enumerate(pairs)]) for name, (lo, hi) in parts.items()}
    out_col = "out of sample" in r
    print(f"{'layer':>5} {'head':>4} {'pearson in':>10} {'pearson out':>11} {'concentration':>13}")
    for layer in range(cal.num_layers):
        for head in range(cal.num_heads):
            out = f"{r['out of sample'][layer, head]:>11.3f}" if out_col else f"{'n/a':>11}"
            print(f"{layer:>5} {head:>4} {r['in sample'][layer, head]:>10.3f} {out} {concentration[layer, head]:>13.3f}")
    for name, values in r.items():
        lo, hi = parts[name]
        print(f"mean Pearson {name} {np.nanmean(values):.3f} (median {np.nanmedian(values):.3f}, min "
              f"{np.nanmin(values):.3f}) on tokens {lo}..{hi - 1}, distances 1..{deltas[-1]}")
    if not out_col:
        print("no held-out tokens: out-of-sample Pearson not measured (use --calibration-fraction < 1)")
    print(f"mean concentration {concentration.mean():.3f}")
    return 0
