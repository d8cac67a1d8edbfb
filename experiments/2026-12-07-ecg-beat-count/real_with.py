"""bench/vitals_real.py with a candidate graph installed as a shipped model (not yet shipped):
a folder of links to every shipped model plus CANDIDATE as NAME.onnx replaces the models
folder for this run only.

    python experiments/2026-12-07-ecg-beat-count/real_with.py CANDIDATE.onnx NAME [BENCH ARGS]
"""

import runpy
import sys
import tempfile
from pathlib import Path

import liquid_stream.models as models

candidate, name, *rest = sys.argv[1:]
if not Path(candidate).is_file():  # a missing graph would just leave the model's rows out
    sys.exit(f"real_with.py: no graph {candidate}")
tmp = Path(tempfile.mkdtemp(prefix="models-"))
for p in models.HERE.glob("*.onnx"):
    (tmp / p.name).symlink_to(p)
(tmp / f"{name}.onnx").unlink(missing_ok=True)
(tmp / f"{name}.onnx").symlink_to(Path(candidate).resolve())
models.HERE = tmp
sys.argv = ["bench/vitals_real.py", *rest]
runpy.run_path("bench/vitals_real.py", run_name="__main__")
