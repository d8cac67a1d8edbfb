"""Does the shipped PPG HR model hold on pulses with a tall reflected / dicrotic wave (issue 64
item 2: amplitude 40-90 % of the systolic peak, arriving 0.15-0.4 s after it, across the HR
range)? NeuroKit2 on the same seconds.

    python experiments/2026-12-07-tall-dicrotic/study.py [--model NAME] [--minutes 2]

Records: the randomised simulator's parametric PPG family (training/data/vitals/vitals_sim.py) with
the reflected wave forced: ratio R of the systolic peak, delay D seconds (the simulator draws
it as a fraction of the beat interval: D x HR / 60), at a steady rate HR (hr_sd 0, no rate
changes), no ectopic beats, AF, motion or sensor-off; every other draw as the simulator makes
it (noise, wander, perfusion, units). Grid: HR 50 ... 150, R 0.5 / 0.7 / 0.9, D 0.2 / 0.3 /
0.4 s (cells whose wave would fall past 0.75 of the beat are left out). Each record is streamed
through the app's own path (open_record + run_record) with the model alone; every valid
second is scored against the record's 1 Hz numerics over the model's window, as
bench/vitals_stream.py does. NeuroKit2: ppg_findpeaks (elgendi) on the whole PLETH
(non-causal), 60 / median interval of the peaks in the trailing 32 s.
"""

from __future__ import annotations

import argparse
import math
import shlex
import subprocess
import sys
import tempfile
from datetime import date
from pathlib import Path

import numpy as np

from liquid_stream.apps.vitals.run import open_record, run_record
from liquid_stream.models import shipped
from liquid_stream.training.data.vitals.bidmc_sim import write_record
from liquid_stream.training.data.vitals.vitals_sim import REC_NAMES, simulate_randomised

FS = 125
PLETH = REC_NAMES.index("PLETH,")
HRS = (50, 70, 90, 110, 130, 150)
RATIOS = (0.5, 0.7, 0.9)
DELAYS = (0.2, 0.3, 0.4)
QUIET = {"hr_sd": 0.0, "hr_changes": [], "ectopic_prob": 0.0, "af_episodes": [],
         "motion_bursts": [], "sensor_off": [], "motion_per_min": 0.0}  # fmt: skip


def nk2_rate(x: np.ndarray, seconds: np.ndarray) -> np.ndarray:
    import neurokit2 as nk

    peaks = nk.ppg_findpeaks(nk.ppg_clean(x, sampling_rate=FS), sampling_rate=FS)["PPG_Peaks"]
    t = np.asarray(peaks) / FS
    out = np.full(len(seconds), math.nan)
    for k, s in enumerate(seconds):
        p = t[(t >= s - 32) & (t < s)]
        if len(p) >= 3:
            out[k] = 60 / np.median(np.diff(p))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="vitals-ppg-hr")
    ap.add_argument("--minutes", type=float, default=2.0)
    args = ap.parse_args()
    model = shipped(args.model)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()  # fmt: skip
    print(f"Command: `python {shlex.join(sys.argv)}`; {date.today()}, commit {commit}\n")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        i = 0
        for hr in HRS:
            for ratio in RATIOS:
                for delay in DELAYS:
                    phase = delay * hr / 60
                    if phase > 0.5:  # with the systolic peak at <= 0.25: past 0.75 of the beat
                        continue
                    force = {**QUIET, "hr0": float(hr), "ppg_refl_ratio": ratio,
                             "ppg_refl_delay": phase}  # fmt: skip
                    rec = simulate_randomised(np.random.default_rng([77, i]), args.minutes,
                                              family="param", force=force)  # fmt: skip
                    name = f"bidmc{i + 1:02d}"
                    write_record(tmp, name, rec)
                    monitor, source = open_record([model], Path(tmp) / name)
                    res = run_record(monitor, source, speed=None)
                    ests = [e for e in res.estimates if e.status.get("hr") in ("ok", "bridged")]
                    v = np.array([e.values["hr"] for e in ests])
                    r = np.array([e.ref["hr"] for e in ests])
                    sec = np.array([e.time_s for e in ests])
                    nk = nk2_rate(rec["signals"][:, PLETH], sec)
                    rows.append((hr, ratio, delay, v, r, nk))
                    i += 1
    print("| HR | reflected wave | records | model RMSE | bias | within ±5 | NeuroKit2 RMSE | ±5 |")
    print("|---|---|---|---|---|---|---|---|")

    def cell(sel, label_hr, label_w):
        v = np.concatenate([r[3] for r in sel])
        ref = np.concatenate([r[4] for r in sel])
        nk = np.concatenate([r[5] for r in sel])
        ok = np.isfinite(ref)
        d, dn = v[ok] - ref[ok], nk[ok] - ref[ok]
        dn = np.where(np.isfinite(dn), dn, 60.0)  # a second NeuroKit2 cannot read: counted 60 off
        rm = math.sqrt(np.mean(d**2))
        print(f"| {label_hr} | {label_w} | {len(sel)} | {rm:.2f} | {d.mean():+.2f} | "
              f"{np.mean(np.abs(d) <= 5):.1%} | {math.sqrt(np.mean(dn**2)):.2f} | "
              f"{np.mean(np.abs(dn) <= 5):.1%} |")  # fmt: skip

    for hr in HRS:
        cell([r for r in rows if r[0] == hr], hr, "all")
    for ratio in RATIOS:
        cell([r for r in rows if r[1] == ratio], "all", f"ratio {ratio}")
    for delay in DELAYS:
        cell([r for r in rows if r[2] == delay], "all", f"delay {delay} s")
    cell(rows, "all", "all")
    print("\nModel by HR and delay (the three ratios pooled): RMSE, bias, within ±5")
    print("\n| HR | " + " | ".join(f"delay {d} s" for d in DELAYS) + " |")
    print("|---|" + "---|" * len(DELAYS))
    for hr in HRS:
        out = []
        for delay in DELAYS:
            sel = [r for r in rows if r[0] == hr and r[2] == delay]
            if not sel:
                out.append("–")
                continue
            v, ref = np.concatenate([r[3] for r in sel]), np.concatenate([r[4] for r in sel])
            d = (v - ref)[np.isfinite(ref)]
            out.append(
                f"{math.sqrt(np.mean(d**2)):.1f}, {d.mean():+.1f}, {np.mean(abs(d) <= 5):.0%}"
            )
        print(f"| {hr} | " + " | ".join(out) + " |")
    print("\nNeuroKit2 seconds without a reading count as 60 bpm off.")


if __name__ == "__main__":
    main()
