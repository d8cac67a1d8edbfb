"""One morphology family of a randomised record folder, as links (scripts/xgen-*.sh).

    python scripts/family_subset.py SRC DST FAMILY

SRC is a folder of ``liquid-stream data bidmc-sim --randomised`` (its ``params.json`` names
each record's family under ``per_record``); DST gets a symbolic link to each record pair of
FAMILY (``NAME.hea``, ``NAME.dat``, ``NAMEn.hea``, ``NAMEn.dat``; links that exist are
kept), a ``params.json`` whose ``per_record`` holds those records only, and a ``RECORDS``
list. The records themselves are not copied or changed.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path


def subset(src: Path, dst: Path, family: str) -> list[str]:
    """Link FAMILY's records of ``src`` into ``dst`` (module docstring); their names."""
    src = src.resolve()
    dst.mkdir(parents=True, exist_ok=True)
    p = json.loads((src / "params.json").read_text())
    names = [n for n, v in p["per_record"].items() if v["family"] == family]
    for n in names:
        for suffix in (".hea", ".dat", "n.hea", "n.dat"):
            if not (dst / (n + suffix)).exists():
                os.symlink(src / (n + suffix), dst / (n + suffix))
    p["per_record"] = {n: p["per_record"][n] for n in names}
    (dst / "params.json").write_text(json.dumps(p))
    (dst / "RECORDS").write_text("".join(f"{n}\n{n}n\n" for n in names))
    return names


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src", type=Path, help="a randomised record folder (with params.json)")
    ap.add_argument("dst", type=Path, help="the subset folder (created)")
    ap.add_argument("family", help="the morphology family to keep, e.g. nk2 or param")
    a = ap.parse_args()
    subset(a.src, a.dst, a.family)


if __name__ == "__main__":
    main()
