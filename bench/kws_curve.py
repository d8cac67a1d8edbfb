"""Detection rate against the false-accept budget, for several spotters on one labelled stream.

    python bench/kws_curve.py A.onnx B.onnx ... --stream val.wav --labels val.csv

For comparing recipes on a VALIDATION stream (``liquid-stream data kws-stream --split
validation``) without fixing one operating point: each model's posteriors are computed once
(:func:`liquid_stream.apps.kws.tune.posterior_trace`, 100 ms chunks), and for every
smoothing window × threshold of kws-tune's grid the app's rule is replayed and scored (as
``kws-tune`` does). Printed per model: the best detection rate at ≤ 2 / 4 / 6 / 8 / 10 /
20 false accepts per hour (over every smoothing window and threshold), and their mean over
2 … 10 / h, one number for the low-false-accept region. A budget of b / h on an h-hour
stream allows ⌊b·h⌋ false accepts: on a short stream the low budgets are coarse.

A model written ``A.onnx+B.onnx`` is the ensemble of the two: the mean of their posteriors,
which is what ``liquid-stream export A.pt B.pt`` writes as one graph (export/ensemble.py;
tests/export/test_ensemble.py checks the graph against the members streamed alone). Each graph's
posteriors are computed once per run, however many rows use it.
"""

from __future__ import annotations

import argparse
import shlex
import sys

import numpy as np
from kws_baseline import best_at, sweep  # noqa: E402

from liquid_stream.apps.kws.tune import (  # noqa: E402
    SMOOTH_GRID_MS,
    THRESHOLD_GRID,
    posterior_trace,
    smooth,
)
from liquid_stream.io.labels import read_label_csv  # noqa: E402
from liquid_stream.io.wav import read_pcm16  # noqa: E402

BUDGETS = (2.0, 4.0, 6.0, 8.0, 10.0, 20.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "models", nargs="+", help="exported keyword spotters (.onnx); A.onnx+B.onnx: their ensemble"
    )
    ap.add_argument("--stream", required=True, help="labelled 16 kHz stream (WAV)")
    ap.add_argument("--labels", required=True, help="its labels CSV")
    a = ap.parse_args()
    cmd = "python bench/kws_curve.py " + " ".join(shlex.quote(v) for v in sys.argv[1:])
    x = read_pcm16(a.stream).astype(np.float32) / 32768.0
    truth = read_label_csv(a.labels)
    rows, cache = [], {}
    for model in a.models:
        for part in model.split("+"):
            if part not in cache:
                cache[part] = posterior_trace(part, x, chunk_ms=100)
        parts = [cache[part] for part in model.split("+")]
        dt, kws = parts[0][1], parts[0][2]
        if any(q[2] != kws for q in parts):
            raise SystemExit(f"{model}: the members' keywords differ")
        p = np.mean([q[0] for q in parts], axis=0)
        traces = {sm: smooth(p, max(1, int(round(sm / 1000 / dt)))) for sm in SMOOTH_GRID_MS}
        table = sweep(traces, dt, THRESHOLD_GRID, truth, kws)
        rows.append((model, [best_at(table, b) for b in BUDGETS]))
        print(f"{model}: done", flush=True)
    minutes = len(x) / 16000 / 60
    n_kw = sum(e.is_keyword for e in truth)
    print(f"\n**Output of `{cmd}`** ({minutes:.0f}-min stream, {n_kw} keywords)\n")
    head = " | ".join(f"≤ {b:g} / h" for b in BUDGETS)
    print(f"| model | {head} | mean of ≤ 2 … 10 / h |")
    print("|---|" + "---|" * (len(BUDGETS) + 1))
    for model, det in rows:
        cells = " | ".join(f"{100 * d:.1f} %" for d in det)
        print(f"| {model} | {cells} | {100 * np.mean(det[:-1]):.1f} % |")


if __name__ == "__main__":
    main()
