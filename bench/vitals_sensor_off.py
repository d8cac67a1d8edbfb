"""When the PPG falls off: HR of PPG + ECG models with the PPG flat, next to NeuroKit2 on the ECG.

    python bench/vitals_sensor_off.py MODEL.onnx [MODEL.onnx …] [--records 8] [--off-at 90]

Records: ``--records`` clean randomised records (training/data/vitals/vitals_sim.py, family
``param``, seeds 1…n with the substream [seed, 7] as the shipped-model tests use, no
ectopic beats, AF, motion or sensor-off of their own, HR constant at 55 + 10·seed bpm),
``--minutes`` long. From ``--off-at`` seconds on, the PLETH channel reads a constant (its
lowest reading before then), as a detached finger clip does; the ECG (II) is intact. Each
model (a `ppg+ecg` HR export, channels PLETH, II) is streamed over the whole record in 1 s
chunks (onnxruntime, :class:`liquid_stream.OnnxStreamer`) and scored every second whose
trailing 32 s window lies wholly in the sensor-off stretch, against the mean true HR over
that window. NeuroKit2 (training/data/vitals/bidmc_baseline.py: R peaks of the ECG, 60·fs / median
RR interval in the same window) is scored on the same seconds. Prints per record and overall
RMSE (NeuroKit2: over the windows where it gives a rate) and the share within ±5 bpm (a
window without a rate counts as outside), with the command.
"""

from __future__ import annotations

import argparse
import shlex
import sys

import numpy as np

from liquid_stream.runtime.onnx_streamer import OnnxStreamer
from liquid_stream.training.data.vitals.bidmc_baseline import (
    HR_RANGE,
    ecg_peaks,
    rate_in_window,
)
from liquid_stream.training.data.vitals.bidmc_sim import SIG_NAMES
from liquid_stream.training.data.vitals.vitals_sim import NO_ARTEFACTS, simulate_randomised

FS = 125
WINDOW = 32 * FS
PLETH, II = SIG_NAMES.index("PLETH,"), SIG_NAMES.index("II,")
CLEAN = {
    **NO_ARTEFACTS,
    "hr_sd": 0.0,
    "hr_changes": [],
}


def stream(path: str, x: np.ndarray) -> np.ndarray:
    """Per-second outputs (the last sample of each second) of ONNX model ``path``."""
    s = OnnxStreamer(path)
    ys = [s.process(x[None, i : i + FS].astype(np.float32)) for i in range(0, len(x), FS)]
    return np.concatenate(ys, 1)[0, FS - 1 :: FS, 0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="+", help="ppg+ecg HR ONNX exports (channels PLETH, II)")
    ap.add_argument("--records", type=int, default=8)
    ap.add_argument("--minutes", type=float, default=4.0)
    ap.add_argument("--off-at", type=float, default=90.0, help="PPG flat from this second on")
    args = ap.parse_args()
    names = [*args.models, "NeuroKit2 (ECG)"]
    err: dict[str, list[np.ndarray]] = {n: [] for n in names}
    print("| record | true HR | " + " | ".join(names) + " |")
    print("|---" * (len(names) + 2) + "|")
    for seed in range(1, args.records + 1):
        hr0 = 55.0 + 10.0 * seed
        rec = simulate_randomised(
            np.random.default_rng([seed, 7]),
            args.minutes,
            family="param",
            force={**CLEAN, "hr0": hr0},
        )
        x = rec["signals"][:, [PLETH, II]].astype(np.float64)
        off = int(args.off_at * FS)
        x[off:, 0] = x[:off, 0].min()
        hr = rec["truth"]["hr"]
        ends = np.arange(FS - 1, len(x), FS)  # last sample of each second
        keep = ends - WINDOW + 1 >= off
        truth = np.array([hr[e - WINDOW + 1 : e + 1].mean() for e in ends[keep]])
        peaks = ecg_peaks(x[:, 1], FS)
        nk = np.array(
            [rate_in_window(peaks, e - WINDOW + 1, WINDOW, FS, 3, HR_RANGE) for e in ends[keep]]
        )
        row = []
        for name, path in zip(names, [*args.models, None], strict=True):
            est = nk if path is None else stream(path, x)[keep]
            err[name].append(est - truth)
            row.append(f"{np.sqrt(np.nanmean((est - truth) ** 2)):.2f}")
        print(f"| {seed} | {hr0:.0f} | " + " | ".join(row) + " |")
    print(
        "| **all** (RMSE / within ±5) | | "
        + " | ".join(
            f"**{np.sqrt(np.nanmean(np.concatenate(e) ** 2)):.2f}** / "
            f"{100 * np.mean(np.abs(np.concatenate(e)) <= 5):.1f} %"
            for e in err.values()
        )
        + " |"
    )
    print(
        f"\nRMSE in bpm over the seconds whose 32 s window is all sensor-off "
        f"({args.minutes:g} min records, PPG flat from {args.off_at:g} s)."
    )
    print(f"Command: python bench/vitals_sensor_off.py {shlex.join(sys.argv[1:])}")


if __name__ == "__main__":
    main()
