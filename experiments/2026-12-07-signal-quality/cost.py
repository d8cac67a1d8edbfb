"""What does the trust stage (signal quality + PPG polarity) cost and buy on simulated
records?

    python experiments/2026-12-07-signal-quality/cost.py MODEL.onnx --records runs/sim/sel-s9

Each record is streamed through `liquid-stream vitals`' own path (open_record + run_record)
twice: as shipped, and with the stage switched off (every second judged good, no polarity
decision: the monitor before issue 64). Seconds are scored against the trailing-window
reference. Prints: seconds valid in each, RMSE on the seconds valid in both, and RMSE of the
seconds the stage made invalid (what it kept off the screen) with the reasons it gave.
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

import numpy as np

import liquid_stream.apps.vitals.monitor as vm
from liquid_stream.apps.vitals.run import open_record, run_record


def series(model: str, rec: str, trust: bool):
    saved = vm.judge, vm.needs_polarity
    if not trust:
        vm.judge = lambda *a, **k: None
        vm.needs_polarity = lambda c: False
    try:
        monitor, source = open_record([model], rec)
        res = run_record(monitor, source)
    finally:
        vm.judge, vm.needs_polarity = saved
    t = res.targets[0]
    est = np.array([e.values[t] for e in res.estimates])
    ok = np.array([e.status[t] in ("ok", "bridged") for e in res.estimates])
    ref = np.array([e.ref.get(t, np.nan) for e in res.estimates])
    why = [tuple(e.technical) for e in res.estimates]
    status = [e.status[t] for e in res.estimates]
    return est, ok, ref, why, status


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--records", required=True)
    ap.add_argument("--limit", type=int, default=0)
    a = ap.parse_args()
    recs = sorted(
        p.with_suffix("") for p in Path(a.records).glob("bidmc*.hea") if not p.stem.endswith("n")
    )
    if a.limit:
        recs = recs[: a.limit]
    both, removed, n_new, n_old, reasons, kinds = [], [], 0, 0, Counter(), Counter()
    for r in recs:
        e1, v1, ref, why, st = series(a.model, str(r), True)
        e0, v0, _, _, _ = series(a.model, str(r), False)
        fin = np.isfinite(ref)
        n_new += int((v1 & fin).sum())
        n_old += int((v0 & fin).sum())
        m = v1 & v0 & fin
        both.append(np.c_[e1[m] - ref[m], e0[m] - ref[m]])
        gone = v0 & ~v1 & fin
        removed.append(e0[gone] - ref[gone])
        for k in np.flatnonzero(gone):
            kinds[st[k]] += 1
            for w in why[k]:
                reasons[w.split("(")[-1].rstrip(")")] += 1
    b = np.concatenate(both)
    g = np.concatenate(removed)
    rm = lambda x: float(np.sqrt(np.mean(x**2))) if len(x) else float("nan")  # noqa: E731
    print(f"model {a.model}, {len(recs)} records of {a.records}")
    print("| | seconds valid | RMSE on the seconds valid in both |")
    print("|---|---|---|")
    print(f"| with the trust stage | {n_new} | {rm(b[:, 0]):.3f} |")
    print(f"| without (before issue 64) | {n_old} | {rm(b[:, 1]):.3f} |")
    print(
        f"\nseconds the stage made invalid: {len(g)} ({len(g) / max(n_old, 1):.1%}), "
        f"RMSE {rm(g):.2f} of the estimates it kept off the screen; "
        f"as {dict(kinds)}; technical reasons (second-channel counts): {dict(reasons)}"
    )


if __name__ == "__main__":
    main()
