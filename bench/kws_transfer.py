"""Does a keyword spotter's tuned threshold hold on another stream? kws-tune's choice made on
each stream in turn, then scored on every other.

    python bench/kws_transfer.py A.onnx [B.onnx …] --streams v1.wav:v1.csv v2.wav:v2.csv …

``kws-tune`` picks the smoothing window and threshold with the best detection at ≤
``--max-fa-per-hour`` on one labelled stream (:func:`liquid_stream.apps.kws.tune.choose`).
That point is the best of ~175 tried on that stream, so its false-accept rate there is an
optimistic estimate of the rate on new audio (the winner's curse), the more so the fewer
false accepts the budget allows: on a 60-minute stream ≤ 5 / h is at most 5 events. Run it
on streams of the *validation* speakers (different draws and seeds of
``liquid-stream data kws-stream --split validation``), never on the test stream, to see how
far the chosen point moves before a test is scored.

Per model, one row per tuning stream: the chosen point, its detection and false accepts per
hour on the tuning stream, the same point on every other stream, and on all the other
streams pooled (their false accepts over their summed duration). Then, with three or more
streams, the same choice made on all streams but one *pooled* (kws-tune's rule on their
summed false accepts over their summed hours, and their summed detections over their summed
keywords) and scored on the one left out: does tuning on more hours transfer better? Each
model's table per stream is kws-tune's own (:func:`~liquid_stream.apps.kws.tune.tune_thresholds`,
100 ms chunks, as ``kws-tune --chunk-ms 100``).

``--tune-on K [K …]`` adds the rule the main job would follow with K validation hours: the
point chosen on the *first* K streams pooled, at each budget of ``--max-fa-per-hour B [B …]``,
scored on every stream after the largest K (e.g. hours of voices no model trained on), so that
every rule is judged on the same hours; and a summary over all models per (K, B): mean
detection and false accepts per hour on those streams, and on how many of them both halves of
``--goal DET:FA`` hold (default the main job's: ≥ 90 % at ≤ 5 / h). The per-stream and
leave-one-out tables use the first budget.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

import numpy as np

from liquid_stream.apps.kws.tune import choose, tune_thresholds
from liquid_stream.io.labels import read_label_csv
from liquid_stream.io.wav import read_pcm16


def point(rows: list[dict], pick: dict) -> dict:
    """The row of ``rows`` at ``pick``'s smoothing window and threshold."""
    key = (pick["smooth_ms"], pick["threshold"])
    return next(r for r in rows if (r["smooth_ms"], r["threshold"]) == key)


def pooled(tables: list[list[dict]], hours: list[float], targets: list[int]) -> list[dict]:
    """kws-tune's table over several streams at once: per (smoothing, threshold), detections
    and false accepts summed over the streams."""
    out = []
    for rows in zip(*tables, strict=True):
        out.append(
            {
                "smooth_ms": rows[0]["smooth_ms"],
                "threshold": rows[0]["threshold"],
                "detection_rate": sum(
                    r["detection_rate"] * n for r, n in zip(rows, targets, strict=True)
                )
                / sum(targets),
                "false_accepts_per_hour": sum(
                    r["false_accepts_per_hour"] * h for r, h in zip(rows, hours, strict=True)
                )
                / sum(hours),
            }
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="+", help="exported keyword spotters (.onnx)")
    ap.add_argument(
        "--streams",
        nargs="+",
        required=True,
        metavar="WAV:CSV",
        help="labelled 16 kHz streams (at least two)",
    )
    ap.add_argument("--max-fa-per-hour", type=float, nargs="+", default=[5.0], metavar="B")
    ap.add_argument(
        "--tune-on",
        type=int,
        nargs="+",
        default=[],
        metavar="K",
        help="choose on the first K streams pooled, score those after the largest K",
    )
    ap.add_argument(
        "--goal",
        default="90:5",
        metavar="DET:FA",
        help="detection %% and FA / h both halves of which are counted [90:5]",
    )
    a = ap.parse_args()
    if len(a.streams) < 2 or any(s.count(":") != 1 for s in a.streams):
        raise SystemExit("--streams: two or more WAV:CSV pairs")
    if any(not 1 <= k < len(a.streams) for k in a.tune_on):
        raise SystemExit(f"--tune-on: each K in 1 … {len(a.streams) - 1} (one left to score)")
    try:
        goal_det, goal_fa = (float(v) for v in a.goal.split(":"))
    except ValueError:
        raise SystemExit(f"--goal: DET:FA, two numbers (e.g. 90:5), not {a.goal!r}") from None
    scored = max(a.tune_on, default=0)  # --tune-on: the streams from this one on are scored
    cmd = "python bench/kws_transfer.py " + " ".join(shlex.quote(v) for v in sys.argv[1:])
    streams = []
    for s in a.streams:
        wav, csv = s.split(":")
        x = read_pcm16(wav).astype(np.float32) / 32768.0
        streams.append((Path(wav).stem, x, read_label_csv(csv), len(x) / 16000 / 3600))
    budget = a.max_fa_per_hour[0]
    hours = [st[3] for st in streams]  # per stream, for pooling
    targets = [sum(e.is_keyword for e in st[2]) for st in streams]
    table, loo, tuned = [], [], []
    for model in a.models:
        rows = []  # per stream: kws-tune's table (every smoothing window and threshold)
        for name, x, truth, _ in streams:
            rows.append(tune_thresholds(model, x, truth, budget, chunk_ms=100).table)
            print(f"{model} on {name}: done", flush=True)
        for i, (name, *_rest) in enumerate(streams):
            pick = choose(rows[i], budget)
            on = [point(r, pick) for r in rows]
            others = [j for j in range(len(streams)) if j != i]
            fa = sum(on[j]["false_accepts_per_hour"] * hours[j] for j in others)
            det = np.mean([on[j]["detection_rate"] for j in others])
            table.append((model, name, pick, on, fa / sum(hours[j] for j in others), det))
        if len(streams) >= 3:  # choose on the others pooled, score on the one left out
            for i, (name, *_rest) in enumerate(streams):
                others = [j for j in range(len(streams)) if j != i]
                pool = pooled(
                    [rows[j] for j in others],
                    [hours[j] for j in others],
                    [targets[j] for j in others],
                )
                pick = choose(pool, budget)
                loo.append((model, name, pick, point(pool, pick), point(rows[i], pick)))
        for k in a.tune_on:  # the first k streams pooled choose; those from `scored` on are scored
            pool = pooled(rows[:k], hours[:k], targets[:k])
            for b in a.max_fa_per_hour:
                pick = choose(pool, b)
                tuned.append((model, k, b, pick, [point(r, pick) for r in rows[scored:]]))
    names = [s[0] for s in streams]
    print(
        f"\n**Output of `{cmd}`** (operating point chosen at ≤ {budget:g} false accepts / h; "
        "each cell: detection, false accepts / h)\n"
    )
    print(
        "| model | chosen on | smoothing, threshold | "
        + " | ".join(names)
        + " | the others: mean detection, pooled FA / h |"
    )
    print("|---|---|---|" + "---|" * (len(names) + 1))
    for model, name, pick, on, fa, det in table:
        cells = " | ".join(
            ("**" if n == name else "") + f"{100 * r['detection_rate']:.1f} %, "
            f"{r['false_accepts_per_hour']:.0f}" + ("**" if n == name else "")
            for n, r in zip(names, on, strict=True)
        )
        print(
            f"| {model} | {name} | {pick['smooth_ms']:g} ms, {pick['threshold']:.2f} | "
            f"{cells} | {100 * det:.1f} %, {fa:.1f} |"
        )

    if loo:
        print(f"\nChosen on all streams but one, pooled (≤ {budget:g} / h), scored on that one:\n")
        print(
            "| model | left out | smoothing, threshold | pooled: detection, FA / h "
            "| left out: detection, FA / h |\n|---|---|---|---|---|"
        )
        for model, name, pick, p, r in loo:
            print(
                f"| {model} | {name} | {pick['smooth_ms']:g} ms, {pick['threshold']:.2f} | "
                f"{100 * p['detection_rate']:.1f} %, {p['false_accepts_per_hour']:.1f} | "
                f"{100 * r['detection_rate']:.1f} %, {r['false_accepts_per_hour']:.0f} |"
            )

    if tuned:
        print("\nChosen on the first K streams pooled (≤ B / h), scored on the last ones:\n")
        print("| model | K | B | smoothing, threshold | scored: detection, FA / h |")
        print("|---|---|---|---|---|")
        for model, k, b, pick, on in tuned:
            cells = "; ".join(
                f"{names[scored + j]} {100 * r['detection_rate']:.1f} %, "
                f"{r['false_accepts_per_hour']:.0f}"
                for j, r in enumerate(on)
            )
            print(
                f"| {model} | {k} | {b:g} | {pick['smooth_ms']:g} ms, {pick['threshold']:.2f} "
                f"| {cells} |"
            )
        print(f"\nSummary over the models (goal: ≥ {goal_det:g} % at ≤ {goal_fa:g} / h):\n")
        print("| K | B | mean detection | mean FA / h | streams meeting the goal |")
        print("|---|---|---|---|---|")
        for k in a.tune_on:
            for b in a.max_fa_per_hour:
                on = [r for _, kk, bb, _, rs in tuned if (kk, bb) == (k, b) for r in rs]
                met = sum(
                    100 * r["detection_rate"] >= goal_det and r["false_accepts_per_hour"] <= goal_fa
                    for r in on
                )
                print(
                    f"| {k} | {b:g} | {100 * np.mean([r['detection_rate'] for r in on]):.1f} % "
                    f"| {np.mean([r['false_accepts_per_hour'] for r in on]):.1f} "
                    f"| {met} of {len(on)} |"
                )


if __name__ == "__main__":
    main()
