"""The weights of a vital-sign ensemble, chosen by streamed RMSE on held-out records.

    python bench/ensemble_weights.py M0.onnx M1.onnx M2.onnx --records ROOT \
        [--groups 0,0,1] [--step 0.05] [--cache DIR]

Each member graph (exported alone) is streamed over every record under ``--records``
exactly as ``bench/vitals_stream.py`` streams a model (``liquid-stream vitals``' own code
path); the members must score the same seconds against the same references (they do when
they share target, channels and window, as an ensemble's members must). The estimate of an
ensemble graph with weights w is then Σ_i w_i ŷ_i at every scored second (the graph's
output is that sum at every sample, and the per-second estimate is a mean of samples, so it
is linear in the members' outputs; checked against the equal-weight graph to ~5e-6
breaths/min in docs/benchmarks.md §5.2). Weights run over a grid of step ``--step`` on the
simplex; ``--groups`` ties members to one shared weight (e.g. two seeds of one recipe:
``0,0,1`` gives one free number, the third member's share, the first two splitting the
rest equally), so the choice has as few free numbers as the question needs. Prints the
RMSE of every member alone, of the plain mean, and of the grid's best points, the
``--weights`` for `liquid-stream export` / `evaluate --mean`, and the command. ``--cache DIR``
keeps each member's streamed estimates in DIR, keyed by the SHA-256 of the graph's bytes and
of the records' files, so comparing combinations of the same members streams each once.

Choose on a selection set and score the chosen graph once on the others: the weights are
fitted numbers, and a test set that chose them would no longer be held out.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import shlex
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

from vitals_stream import streamed  # noqa: E402

from liquid_stream.io.atomic import atomic_open  # noqa: E402
from liquid_stream.training.data.vitals.bidmc import list_records, wfdb_dir  # noqa: E402


def simplex(n: int, step: float):
    """Every point of the grid {k·step} on the n-simplex (n numbers ≥ 0 summing to 1)."""
    m = round(1 / step)
    for ks in itertools.product(range(m + 1), repeat=n - 1):
        if sum(ks) <= m:
            yield np.array([*ks, m - sum(ks)], dtype=np.float64) / m


def digest(paths: list[Path]) -> str:
    """SHA-256 of the bytes of ``paths`` (in order, with their names)."""
    h = hashlib.sha256()
    for p in paths:
        h.update(p.name.encode() + b"\0" + p.read_bytes())
    return h.hexdigest()[:24]


def streamed_cached(model: Path, records: list[Path], cache: Path | None):
    """:func:`vitals_stream.streamed`, read from / written to ``cache`` when given."""
    if cache is None:
        return streamed(model, records)
    files = sorted(
        {
            f
            for r in records
            for n in (r.name, r.name + "n")  # signals, numerics
            for f in r.parent.glob(n + ".*")
        }
    )
    path = cache / f"{digest([model])}-{digest(files)}.npz"
    if path.exists():
        z = np.load(path)
        return str(z["target"]), z["est"], z["ref"], z["which"]
    target, e, r, which = streamed(model, records)
    with atomic_open(path) as f:  # a cache entry is whole or absent
        np.savez(f, target=target, est=e, ref=r, which=which)
    return target, e, r, which


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", type=Path, nargs="+")
    ap.add_argument("--records", type=Path, required=True)
    ap.add_argument("--groups", default=None, help="member i's weight group, e.g. 0,0,1")
    ap.add_argument("--step", type=float, default=0.05)
    ap.add_argument("--top", type=int, default=8)
    ap.add_argument("--cache", type=Path, default=None, help="keep streamed estimates here")
    a = ap.parse_args()
    k = len(a.models)
    groups = [int(g) for g in a.groups.split(",")] if a.groups else list(range(k))
    if len(groups) != k or sorted(set(groups)) != list(range(max(groups) + 1)):
        ap.error("--groups: one group per model, numbered 0, 1, ... without gaps")
    records = [wfdb_dir(a.records) / n for n in list_records(a.records)]
    est, ref = [], None
    for m in a.models:
        target, e, r, _ = streamed_cached(m, records, a.cache)
        if ref is not None and not np.array_equal(r, ref):  # other seconds or references
            sys.exit(f"{m} scores other seconds than {a.models[0]}: not members of one ensemble")
        est.append(e)
        ref = r
    E = np.stack(est, 1)  # (seconds, K)

    def rmse(w: np.ndarray) -> float:
        return float(np.sqrt(np.mean((E @ w - ref) ** 2)))

    size = np.bincount(groups)
    rows = []
    for g in simplex(len(size), a.step):  # a group's weight, split equally among its members
        w = np.array([g[groups[i]] / size[groups[i]] for i in range(k)])
        if (w > 0).all():  # export takes positive weights only
            rows.append((rmse(w), w))
    rows.sort(key=lambda r: r[0])
    print(f"{target}: {len(ref)} seconds of {len(records)} records under {a.records}\n")
    print("| weights | RMSE |\n|---|---|")
    for i, m in enumerate(a.models):
        print(f"| {m} alone | {rmse(np.eye(k)[i]):.3f} |")
    print(f"| plain mean (1/{k} each) | {rmse(np.full(k, 1 / k)):.3f} |")
    for r, w in rows[: a.top]:
        print(f"| {', '.join(f'{v:.3f}' for v in w)} | {r:.3f} |")
    best = rows[0][1]
    print(f"\nbest: --weights {','.join(f'{v:g}' for v in np.round(best, 6))}")
    print(f"\nCommand: `python bench/ensemble_weights.py {shlex.join(sys.argv[1:])}`")


if __name__ == "__main__":
    main()
