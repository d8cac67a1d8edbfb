"""Add the content hash (the ``integrity`` metadata entry, liquid_stream/runtime/quantized.py) to
graphs exported before it existed, changing nothing else, and prove it.

    python scripts/stamp_integrity.py liquid_stream/models/*.onnx

Why: a graph without the hash loads with a warning, and a corrupt one runs silently. The
shipped models were exported (and tuned) before the hash; re-exporting them from their
checkpoints would give the same graphs plus the entry (the exporter stamps it last), which
is what this script writes without the checkpoints. For each file it checks, before
replacing it: the file has no ``integrity`` entry yet (a stamped one is left alone), and
the new file's bytes are the old file's bytes followed by the one new metadata entry (the
metadata is the last field a model proto serialises: nodes, weights, opsets and every
other entry are byte for byte the old ones), and the new file loads and matches its hash.
The file keeps its permission bits; it is replaced atomically.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import onnx

from liquid_stream.io.atomic import atomic_path
from liquid_stream.runtime.quantized import INTEGRITY_KEY, check_integrity, stamp_integrity


def stamp_file(path: Path) -> str:
    """Stamp ``path`` (module docstring); returns what was done, one line."""
    old = path.read_bytes()
    model = onnx.load_from_string(old)
    if any(p.key == INTEGRITY_KEY for p in model.metadata_props):
        return f"{path}: already stamped, left as it is"
    stamp_integrity(model)
    new = model.SerializeToString()
    if not new.startswith(old):
        raise SystemExit(f"{path}: the stamped file is not the old bytes + one entry; not written")
    check = onnx.load_from_string(new)
    if (
        not check_integrity(check)
        or check.graph.SerializeToString() != onnx.load_from_string(old).graph.SerializeToString()
    ):
        raise SystemExit(f"{path}: the stamped graph does not check; not written")
    mode = stat.S_IMODE(path.stat().st_mode)
    with atomic_path(path) as tmp:
        tmp.write_bytes(new)
        os.chmod(tmp, mode)
    return f"{path}: stamped (+{len(new) - len(old)} bytes, graph and other entries unchanged)"


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        print(stamp_file(Path(arg)))
