"""Valid seconds per real record before / after the 1/f test (run once, after the threshold
was chosen on simulated data; nothing here was tuned on it).

    python bench/vitals_real.py runs/real --out /tmp/sq-real-before   # at the parent commit
    python bench/vitals_real.py runs/real --out /tmp/sq-real          # with the 1/f test
    python experiments/2026-12-08-one-over-f/real_check.py /tmp/sq-real-before /tmp/sq-real \
        [--channels runs/real]

Per record and run (model, input): the seconds whose status is ``ok`` or ``bridged``
(valid, what bench/vitals_real.py scores, warm-up included here), and those ``nosignal``.
``--channels``: also every channel of every record (runs/real and runs/real/final, NaN
samples as 0) judged on its own, each second from 8 s on, at 125 Hz (StreamResampler, as
the monitor feeds it), with the 1/f test off (before) and on (after): the seconds it
passes (an ECG lead behind the flat PLETH of the "flat PLETH added" runs is only seen here).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def counts(folder: Path) -> dict:
    out = {}
    for p in sorted(folder.glob("*.json")):
        if p.name == "results.json":
            continue
        d = json.loads(p.read_text())
        for r in d.get("runs", []):
            st = r.get("status", [])
            key = (d["name"], d.get("split", ""), r["label"], r["model"])
            out[key] = (
                sum(s in ("ok", "bridged") for s in st),
                sum(s == "nosignal" for s in st),
                len(st),
            )
    return out


def channels(root: Path) -> None:
    import numpy as np
    import wfdb

    from liquid_stream.apps.common.resample import StreamResampler
    from liquid_stream.apps.vitals import signal_quality as sq

    fs = 125
    chosen = sq.SMOOTH_MIN
    print()
    print("| record | channel | kind | seconds judged | passed before | passed after |")
    print("|---|---|---|---|---|---|")
    for folder in (root, root / "final"):
        for name in (folder / "RECORDS").read_text().split():
            if name.endswith("n"):
                continue  # the numerics
            rec = wfdb.rdrecord(str(folder / name))
            for c, ch in enumerate(rec.sig_name):
                x = np.nan_to_num(rec.p_signal[:, c].astype(np.float64))
                if rec.fs != fs:
                    x = StreamResampler(rec.fs, fs, prime="edge").process(x)
                kind = sq.channel_kind(ch)
                ends = range(8 * fs, len(x) + 1, fs)
                got = {}
                for label, t in (("before", -np.inf), ("after", chosen)):
                    sq.SMOOTH_MIN = t
                    got[label] = sum(sq.judge(x[e - 8 * fs : e], fs, kind) is None for e in ends)
                sq.SMOOTH_MIN = chosen
                print(
                    f"| {name} | {ch} | {kind.name} | {len(ends)} | {got['before']} | "
                    f"{got['after']} |"
                )


def main() -> None:
    before, after = counts(Path(sys.argv[1])), counts(Path(sys.argv[2]))
    print(
        "| record | split | run | model | seconds | valid before | valid after | "
        "nosignal before | nosignal after |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for key in sorted(set(before) | set(after)):
        b, a = before.get(key, (0, 0, 0)), after.get(key, (0, 0, 0))
        print(f"| {' | '.join(key)} | {max(a[2], b[2])} | {b[0]} | {a[0]} | {b[1]} | {a[1]} |")
    if "--channels" in sys.argv:
        channels(Path(sys.argv[sys.argv.index("--channels") + 1]))


if __name__ == "__main__":
    main()
