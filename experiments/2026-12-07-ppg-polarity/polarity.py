"""Does the PPG HR estimate depend on which way up the PPG is?

    python experiments/2026-12-07-ppg-polarity/polarity.py MODEL.onnx [--records 20]

Domain-randomised records (seed 202, not a training seed), PLETH alone at 125 Hz: each
record streamed as it is and turned upside down (x -> -x, the same beats), once through the
bare model (OnnxStreamer: what the model alone does) and once through the monitor
(VitalsMonitor: the PPG turned the right way up by apps/vitals/ppg_polarity.py). Per record the
median |HR(x) - HR(-x)| over the seconds from 40 s on (every second valid for both) and the
RMSE of each against the trailing-window truth. Prints a table and the pooled numbers.
"""

from __future__ import annotations

import argparse

import numpy as np

from liquid_stream.apps.vitals.monitor import VitalsMonitor
from liquid_stream.runtime.onnx_streamer import OnnxStreamer
from liquid_stream.training.data.vitals.vitals_sim import REC_NAMES, simulate_randomised

FS = 125
W = 32 * FS


def per_second(path: str, x: np.ndarray, channels: int) -> np.ndarray:
    s = OnnxStreamer(path)
    y = s.process(x[None].astype(np.float32))[0, :, 0]
    return y[FS - 1 :: FS]


def monitored(path: str, x: np.ndarray, channels: list[str]) -> np.ndarray:
    m = VitalsMonitor([path], channels=[c.rstrip(",") for c in channels])
    ests = m.push(x) + m.flush()
    return np.array([e.values["hr"] if e.status["hr"] == "ok" else np.nan for e in ests])


def window_truth(hr: np.ndarray, n: int) -> np.ndarray:
    ends = np.arange(n) * FS + FS - 1
    c = np.concatenate([[0.0], np.cumsum(hr)])
    lo = np.maximum(0, ends - W + 1)
    return (c[ends + 1] - c[lo]) / (ends + 1 - lo)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--records", type=int, default=20)
    ap.add_argument("--minutes", type=float, default=3.0)
    ap.add_argument("--seed", type=int, default=202)
    ap.add_argument("--channels", default="PLETH", help="comma list, e.g. PLETH,II")
    a = ap.parse_args()
    chans = [c.strip() + "," for c in a.channels.split(",")]
    pl = chans.index("PLETH,")
    rows = {"model": ([], [], []), "monitor": ([], [], [])}
    print(
        "| record | family | model: median abs(HR(x)-HR(-x)) | RMSE x | RMSE -x | "
        "monitor: median abs diff | RMSE x | RMSE -x |"
    )
    print("|---|---|---|---|---|---|---|---|")
    rm = lambda e: float(np.sqrt(np.nanmean(e**2)))  # noqa: E731
    for i in range(a.records):
        rec = simulate_randomised(np.random.default_rng([a.seed, i]), a.minutes)
        x = rec["signals"][:, [REC_NAMES.index(c) for c in chans]]
        if not np.isfinite(x).all():
            x = np.nan_to_num(x, nan=float(np.nanmedian(x)))
        xi = x.copy()
        xi[:, pl] = -xi[:, pl]
        cells = []
        for kind, fn in (
            ("model", lambda v: per_second(a.model, v, len(chans))),
            ("monitor", lambda v: monitored(a.model, v, chans)),
        ):
            up, dn = fn(x), fn(xi)
            ref = window_truth(rec["truth"]["hr"], len(up))
            k = slice(40, None)
            d = np.abs(up[k] - dn[k])
            diffs, e_up, e_dn = rows[kind]
            diffs.append(d)
            e_up.append(up[k] - ref[k])
            e_dn.append(dn[k] - ref[k])
            cells += [f"{np.nanmedian(d):.2f}", f"{rm(e_up[-1]):.2f}", f"{rm(e_dn[-1]):.2f}"]
        print(f"| {i} | {rec['params']['family']} | " + " | ".join(cells) + " |")
    for kind, (diffs, e_up, e_dn) in rows.items():
        meds = [float(np.nanmedian(v)) for v in diffs]
        print(
            f"\n{kind}: median of per-record median abs diffs {np.median(meds):.2f} bpm, worst "
            f"record {max(meds):.2f}; RMSE x {rm(np.concatenate(e_up)):.2f}, "
            f"-x {rm(np.concatenate(e_dn)):.2f}"
        )


if __name__ == "__main__":
    main()
