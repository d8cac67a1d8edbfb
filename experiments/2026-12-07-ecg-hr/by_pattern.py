"""Streamed HR error of a model over an ectopy-rich set, by ectopy pattern, by base sinus
rate and by the reference's band (bench/vitals_stream.py's scoring).

    python experiments/2026-12-07-ecg-hr/by_pattern.py MODEL.onnx DIR [--nosqi] [--flat CH]

``--nosqi``: the monitor's signal-quality check off (as bench_nosqi.py); ``--flat CH``: the
records rewritten with channel CH flat (as bench/vitals_stream.py --flat).
"""

import json
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "bench"), str(ROOT)]

from vitals_stream import rewrite, streamed  # noqa: E402

import liquid_stream.apps.vitals.monitor as vm  # noqa: E402
from liquid_stream.training.data.vitals.bidmc import list_records, wfdb_dir  # noqa: E402


def main() -> None:
    model, root = Path(sys.argv[1]), Path(sys.argv[2])
    if "--nosqi" in sys.argv:
        vm.judge = lambda *a, **k: None
    recs = [wfdb_dir(root) / n for n in list_records(root)]
    draws = json.loads((root / "params.json").read_text())["per_record"]
    if "--flat" in sys.argv:
        tmp = tempfile.TemporaryDirectory()
        recs = rewrite(recs, Path(tmp.name), None, sys.argv[sys.argv.index("--flat") + 1])
    _, e, y, which = streamed(model, recs)
    d = e - y

    def row(name: str, m: np.ndarray) -> None:
        if m.any():
            rmse, within = np.sqrt(np.mean(d[m] ** 2)), 100 * np.mean(np.abs(d[m]) <= 5)
            print(f"| {name} | {m.sum()} | {rmse:.2f} | {d[m].mean():+.2f} | {within:.1f} % |")

    print(f"{model} on {root}")
    print("| group | seconds | RMSE | bias | within ±5 |\n|---|---|---|---|---|")
    row("all", np.ones_like(d, bool))
    pat = np.array([draws[r.name].get("ectopy_pattern", "-") for r in recs])[which]
    for p in sorted(set(pat)):
        row(p, pat == p)
    hr0 = np.array([draws[r.name]["hr0"] for r in recs])[which]
    for lo, hi in ((0, 100), (100, 140), (140, 999)):
        row(f"HR0 {lo}-{hi}", (hr0 >= lo) & (hr0 < hi))
    for lo, hi in ((0, 100), (100, 140), (140, 999)):
        row(f"truth {lo}-{hi}", (y >= lo) & (y < hi))


if __name__ == "__main__":
    main()
