"""Data-layer throughput and padding waste on the synthetic set, with the tiny model's tokenizer.

    .venv/bin/python bench/bench_data.py [--repeats 3] [--batch-size 16] [--row-tokens 1024]

Measures, on the 2,400 synthetic training conversations:

- rendering (chat template + loss mask, :func:`ifdistill.data.render.render`) in examples/s, next to
  transformers' own ``apply_chat_template(tokenize=True)`` (no mask) as the peer in the same run:
  the price of the mask (two template renders and piecewise tokenisation per example);
- collation in examples/s and the padding waste (pad tokens / tokens in the batch tensors) for
  right padding, padding to a multiple of 8, packing into one padding-free row per batch, and
  first-fit packing into rows of ``--row-tokens``; batches follow the training sampler's order;
- the whole ``build_train_dataset`` (load, render, mix at ratio 0.18 with the chat set as replay).

The median of ``--repeats`` runs is reported because the machine may be shared.
"""

from __future__ import annotations

import argparse
import statistics
import time

from transformers import AutoTokenizer

from ifdistill.data.build import build_train_dataset
from ifdistill.data.collate import PackCollator, PadCollator
from ifdistill.data.records import normalise_row
from ifdistill.data.render import render
from ifdistill.data.synthetic import generate
from ifdistill.models.tiny import tiny_model_path


def timed(fn, repeats: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--row-tokens", type=int, default=1024)
    args = ap.parse_args()

    tok = AutoTokenizer.from_pretrained(tiny_model_path())
    examples = [normalise_row(r, source="synthetic", row_id=str(i)) for i, r in enumerate(generate("train"))]
    convs = [ex.to_messages() for ex in examples]
    n = len(convs)
    render(tok, convs[0])  # warm-up: template compilation

    t_render, rendered = timed(lambda: [render(tok, c) for c in convs], args.repeats)
    t_peer, _ = timed(lambda: [tok.apply_chat_template(c, tokenize=True) for c in convs], args.repeats)
    tokens = sum(len(r.input_ids) for r in rendered)
    supervised = sum(r.num_supervised for r in rendered)
    print(f"synthetic train: {n} conversations, {tokens} tokens ({tokens / n:.0f}/example), "
          f"{supervised} supervised ({supervised / tokens:.1%})")
    print(f"render + mask            {n / t_render:10.0f} examples/s  ({tokens / t_render:,.0f} tokens/s)")
    print(f"apply_chat_template peer {n / t_peer:10.0f} examples/s  "
          f"(no mask; ours takes {t_render / t_peer:.2f}x its time)")

    items = [{"input_ids": r.input_ids, "loss_mask": r.loss_mask, "is_replay": False, "index": i}
             for i, r in enumerate(rendered)]
    data = build_train_dataset({"sources": [{"name": "s", "synthetic": "train"}], "max_length": 4096, "seed": 0}, tok)
    order = data.train.epoch_order(0)
    batches = [[items[i] for i in order[b : b + args.batch_size]] for b in range(0, n, args.batch_size)]
    collators = {
        "pad (right)": PadCollator(0),
        "pad to multiple of 8": PadCollator(0, pad_to_multiple_of=8),
        "pack, one row per batch": PackCollator(0),
        f"pack, rows of {args.row_tokens}": PackCollator(0, max_row_tokens=args.row_tokens),
    }
    print(f"\ncollation, batches of {args.batch_size} in sampler order:")
    print(f"  {'collator':28s} {'examples/s':>12s} {'padding waste':>14s} {'rows/batch':>11s}")
    for name, coll in collators.items():
        t, outs = timed(lambda c=coll: [c(b) for b in batches], args.repeats)
        total = sum(o["input_ids"].numel() for o in outs)
        waste = 1 - tokens / total
        rows = statistics.mean(o["input_ids"].shape[0] for o in outs)
        print(f"  {name:28s} {n / t:12.0f} {waste:14.1%} {rows:11.1f}")

    cfg = {"sources": [{"name": "s", "synthetic": "train"}], "replay": [{"name": "chat", "synthetic": "chat"}],
           "ratio": 0.18, "max_length": 1024, "seed": 0}
    t_build, built = timed(lambda: build_train_dataset(cfg, tok), args.repeats)
    m = len(built.train)
    print(f"\nbuild_train_dataset (load + render + mix 0.18): {m} examples in {t_build:.2f}s "
          f"= {m / t_build:.0f} examples/s")


if __name__ == "__main__":
    main()
