"""The keyword spotter next to the classical baseline: MFCC templates + subsequence DTW.

    python bench/kws_baseline.py MODEL.onnx --data SPEECH_ROOT \\
        --val val.wav val.csv --test test.wav test.csv [--templates 5 10 20] [--out R.json]

MODEL is an exported spotter (e.g. the main job's ``runs/<run>/kws/kws.onnx``); SPEECH_ROOT
the Speech Commands root it was trained on (its train split gives the baseline's templates);
the streams come from ``liquid-stream data kws-stream`` (``--split validation`` for
``--val``; the test stream from the test split, speakers never seen by either method).

Both methods are run the same way:
- one pass over each stream gives a score per keyword every 10 ms — the model's softmax
  posteriors (:func:`liquid_stream.apps.kws.tune.posterior_trace`, the app's own code path,
  100 ms chunks), the baseline's standardised minus mean DTW distance
  (:mod:`liquid_stream.training.data.speech.kws_baseline`, templates drawn from the train split);
- the app's decision rule (:func:`liquid_stream.apps.kws.spotter.detect_events`: threshold, re-arm,
  1 s refractory) is replayed for every threshold of a grid (the model: kws-tune's grid of
  thresholds × smoothing windows; the baseline: 100 quantiles of its val scores, dense
  toward the top, and one above the top), scored with
  :func:`~liquid_stream.apps.kws.spotter.evaluate_detections` (1 s tolerance);
- the operating point is chosen on the VALIDATION stream (the highest detection rate at
  ≤ ``--max-fa`` false accepts per hour, kws-tune's rule), then applied once to the test
  stream. The test stream's own best detection at ≤ 5 / 10 / 20 FA/h is printed beside it
  for information only (it is tuned on the test stream: an upper bound, not a result).
Cost: seconds of one CPU core per hour of audio for the scoring pass (features included).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

import numpy as np

from liquid_stream.apps.kws.tune import (
    SMOOTH_GRID_MS,
    THRESHOLD_GRID,
    choose,
    posterior_trace,
    replay,
    smooth,
)
from liquid_stream.io.labels import read_label_csv
from liquid_stream.io.wav import read_pcm16
from liquid_stream.training.data.speech.kws_baseline import (
    TemplateMatcher,
    load_templates,
    mfcc,
    score_frames,
)
from liquid_stream.training.data.speech.kws_stream import SC10

BUDGETS = (5.0, 10.0, 20.0)


def sweep(traces: dict, dt: float, grid, truth, keywords) -> list[dict]:
    """Every (smoothing window, threshold): detection rate and false accepts per hour, rows
    as kws-tune's table (``traces``: window in ms → scores)."""
    rows = []
    for sm, s in traces.items():
        for thr in grid:
            r = replay(s, dt, float(thr), keywords, truth)
            rows.append(
                {
                    "smooth_ms": sm,
                    "threshold": float(thr),
                    "detection_rate": r["detection_rate"] or 0.0,
                    "false_accepts_per_hour": r["false_accepts_per_hour"],
                }
            )
    return rows


def best_at(rows: list[dict], budget: float) -> float:
    ok = [r["detection_rate"] for r in rows if r["false_accepts_per_hour"] <= budget]
    return max(ok) if ok else 0.0


def method_row(name, traces, dt, grid, truth, kws, max_fa, cost, setting=None) -> dict:
    """Choose the operating point on ``traces["val"]`` (kws-tune's rule), apply it to
    ``traces["test"]``; ``setting`` names it (default: the smoothing window)."""
    val_rows = sweep(traces["val"], dt, grid, truth["val"], kws)
    pick = choose(val_rows, max_fa)
    test = replay(traces["test"][pick["smooth_ms"]], dt, pick["threshold"], kws, truth["test"])
    test_rows = sweep(traces["test"], dt, grid, truth["test"], kws)
    return {
        "method": name,
        "setting": setting or f"{pick['smooth_ms']:g} ms",
        "threshold": pick["threshold"],
        "val_detection": pick["detection_rate"],
        "val_fa_per_hour": pick["false_accepts_per_hour"],
        "test_detection": test["detection_rate"],
        "test_fa_per_hour": test["false_accepts_per_hour"],
        "test_targets": test["targets"],
        "per_keyword": {k: v["detection_rate"] for k, v in test["per_keyword"].items()},
        "test_tuned": {str(b): best_at(test_rows, b) for b in BUDGETS},
        "cpu_s_per_hour": cost,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", help="exported keyword spotter (.onnx)")
    ap.add_argument("--data", required=True, help="Speech Commands root (templates: train split)")
    ap.add_argument("--val", nargs=2, required=True, metavar=("WAV", "CSV"))
    ap.add_argument("--test", nargs=2, required=True, metavar=("WAV", "CSV"))
    ap.add_argument(
        "--templates",
        type=int,
        nargs="+",
        default=[5, 10, 20],
        help="templates per keyword (one baseline row each)",
    )
    ap.add_argument("--max-fa", type=float, default=5.0, help="false accepts per hour, on val")
    ap.add_argument("--seed", type=int, default=0, help="template draw")
    ap.add_argument("--out", default=None, help="write the rows as JSON here")
    a = ap.parse_args()
    cmd = "python bench/kws_baseline.py " + " ".join(shlex.quote(v) for v in sys.argv[1:])
    kws = list(SC10)
    audio = {
        k: read_pcm16(w).astype(np.float64) / 32768.0
        for k, (w, _) in (("val", a.val), ("test", a.test))
    }
    truth = {"val": read_label_csv(a.val[1]), "test": read_label_csv(a.test[1])}
    hours = {k: len(x) / 16000 / 3600 for k, x in audio.items()}
    rows = []

    # the model: posteriors once per stream, then kws-tune's smoothing × threshold grid
    traces, cost = {}, 0.0
    for k in ("val", "test"):
        t0 = time.process_time()
        p, dt, labels = posterior_trace(a.model, audio[k].astype(np.float32), chunk_ms=100)
        cost = (time.process_time() - t0) / hours[k] if k == "test" else cost
        if labels != kws:
            raise SystemExit(f"the model's keywords {labels} are not SC10 {kws}")
        traces[k] = {sm: smooth(p, max(1, int(round(sm / 1000 / dt)))) for sm in SMOOTH_GRID_MS}
        print(f"model: {k} stream scored", flush=True)
    name = f"Liquid-S4 ({Path(a.model).name})"
    rows.append(method_row(name, traces, dt, THRESHOLD_GRID, truth, kws, a.max_fa, cost))

    # the baseline: K templates per keyword
    for K in a.templates:
        matcher = TemplateMatcher(load_templates(a.data, kws, K, seed=a.seed), kws)
        tr, feats = {}, {}
        for k in ("val", "test"):
            t0 = time.process_time()
            feats[k] = mfcc(audio[k])
            if k == "val":  # the z-norm of each template's score: from the val stream
                matcher.calibrate(feats[k])
            tr[k] = {0.0: score_frames(matcher, feats[k])}  # no smoothing
            if k == "test":
                cost = (time.process_time() - t0) / hours[k]
        fin = tr["val"][0.0].max(1)
        fin = fin[np.isfinite(fin)]
        q = 1.0 - np.logspace(-6, np.log10(0.5), 100)  # dense in the top tail (false accepts)
        grid = np.unique(np.append(np.quantile(fin, q), fin.max() + 1e-9))
        name = f"MFCC + DTW, {K} templates/keyword"
        rows.append(method_row(name, tr, dt, grid, truth, kws, a.max_fa, cost, "z-norm"))
        print(f"baseline K={K} done", flush=True)

    print(f"\n**Output of `{cmd}`**\n")
    print(
        f"val stream {hours['val'] * 60:.0f} min, test stream {hours['test'] * 60:.0f} min "
        f"({rows[0]['test_targets']} keywords); operating point chosen on val at "
        f"≤ {a.max_fa:g} FA/h\n"
    )
    print(
        "| method | chosen on val | val detection @ FA/h | **test detection** | test FA/h | "
        "test-tuned ≤ 5 / 10 / 20 FA/h (upper bound) | CPU s per hour of audio |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        tt = " / ".join(f"{100 * r['test_tuned'][str(b)]:.1f} %" for b in BUDGETS)
        print(
            f"| {r['method']} | {r['setting']}, {r['threshold']:.3g} | "
            f"{100 * r['val_detection']:.1f} % @ {r['val_fa_per_hour']:.1f} | "
            f"**{100 * r['test_detection']:.1f} %** | {r['test_fa_per_hour']:.1f} | {tt} | "
            f"{r['cpu_s_per_hour']:.0f} |"
        )
    print("\nper keyword, test detection:\n")
    print("| method | " + " | ".join(kws) + " |")
    print("|---|" + "---|" * len(kws))
    for r in rows:
        cells = " | ".join(f"{100 * r['per_keyword'][k]:.0f}" for k in kws)
        print(f"| {r['method']} | {cells} |")
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps({"command": cmd, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
