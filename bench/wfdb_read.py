"""Reading WFDB records: liquid_stream.io.wfdb's fast path against ``wfdb.rdrecord``.

    python bench/wfdb_read.py ROOT [--records N] [--rounds R]

Reads the first N record pairs under ROOT (a BIDMC-layout folder, e.g. from ``liquid-stream
data bidmc-sim``: ``bidmcNN`` signals and ``bidmcNNn`` numerics) R times each way, in
interleaved rounds, checks that both give the same samples (bit for bit, NaN where NaN) and
the same fields, and prints the time per record pair, the ratio, and the command.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time

import numpy as np

from liquid_stream.io.wfdb import read_record
from liquid_stream.training.data.vitals.bidmc import list_records, wfdb_dir


def same(a, b) -> bool:
    """Every attribute of two ``wfdb.Record`` objects equal (arrays bit for bit)."""
    va, vb = vars(a), vars(b)
    if set(va) != set(vb):
        return False
    for k, x in va.items():
        y = vb[k]
        if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
            if not (isinstance(x, np.ndarray) and isinstance(y, np.ndarray)):
                return False
            if x.dtype != y.dtype or not np.array_equal(x, y, equal_nan=True):
                return False
        elif x != y or type(x) is not type(y):
            return False
    return True


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("root")
    ap.add_argument("--records", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    import wfdb

    d = wfdb_dir(args.root)
    paths = [d / n for n in list_records(args.root)[: args.records]]
    paths = [q for p in paths for q in (p, p.with_name(p.name + "n"))]
    equal = sum(same(read_record(p), wfdb.rdrecord(str(p), return_res=64)) for p in paths)
    times: dict[str, list[float]] = {"liquid_stream.io.wfdb": [], "wfdb.rdrecord": []}
    for _ in range(args.rounds):
        t = time.perf_counter()
        for p in paths:
            read_record(p)
        times["liquid_stream.io.wfdb"].append(time.perf_counter() - t)
        t = time.perf_counter()
        for p in paths:
            wfdb.rdrecord(str(p), return_res=64)
        times["wfdb.rdrecord"].append(time.perf_counter() - t)
    pairs = len(paths) // 2
    ms = {k: 1e3 * float(np.median(v)) / pairs for k, v in times.items()}
    print(f"$ python bench/wfdb_read.py {shlex.join(sys.argv[1:])}")
    print(f"{pairs} record pairs, {equal} of {len(paths)} files equal field by field\n")
    print("| reader | ms per record pair (median of rounds) | / fast |")
    print("|---|---|---|")
    for k, v in ms.items():
        print(f"| {k} | {v:.2f} | {v / ms['liquid_stream.io.wfdb']:.1f}× |")


if __name__ == "__main__":
    main()
