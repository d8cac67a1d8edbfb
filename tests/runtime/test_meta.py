"""The metadata schema (liquid_stream/runtime/meta.py) on real files: written by export into a real
ONNX graph and read back through onnx and onnxruntime, graphs written before the schema
(no version) read as they are, malformed or renamed keys refused at export time with a
one-line error, and the module importable without torch or numpy."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import onnx
import onnxruntime as ort
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the fixtures
from fixtures_vitals import export_vital_model, tiny_model, vital_meta  # noqa: E402

from liquid_stream.export.pipeline import export_checkpoint, export_model  # noqa: E402
from liquid_stream.models import KWS, shipped  # noqa: E402
from liquid_stream.nn.checkpoint import save_checkpoint  # noqa: E402
from liquid_stream.runtime.meta import (  # noqa: E402
    LEGACY_VERSION,
    SCHEMA_VERSION,
    VERSION_KEY,
    MetaError,
    ModelMeta,
)


def _props(path: Path) -> dict[str, str]:
    return {p.key: p.value for p in onnx.load(str(path)).metadata_props}


def test_round_trip_through_a_real_onnx_file(tmp_path):
    path = tmp_path / "hr.onnx"
    model, meta = export_vital_model(path, "hr")
    props = _props(path)
    assert props[VERSION_KEY] == str(SCHEMA_VERSION)
    read = ModelMeta.from_onnx_props(props, strict=True)
    assert read == ModelMeta.from_onnx_props(
        ort.InferenceSession(str(path)).get_modelmeta().custom_metadata_map
    )
    # the task fields come back as written, the graph fields as the model says
    assert {k: read.to_dict()[k] for k in meta} == meta
    assert read.schema_version == SCHEMA_VERSION and not read.unknown
    assert read.d_input == model.d_input and read.decoder == "window" and read.chunk == 125
    assert read.decoder_window == read.window == meta["window"]
    assert read.state_spec and read.model_config["d_model"] == model.config["d_model"]
    # and the strings are those of the file, key for key
    assert read.to_onnx_props() == props
    assert ModelMeta.from_dict(read.to_dict()) == read


def test_graphs_without_a_schema_version_still_read(tmp_path):
    # a graph exported before the schema: the shipped spotter's entries without meta_schema
    # (the first shipped spotter, of commit 13ed84c, had exactly these keys)
    props = {k: v for k, v in _props(shipped(KWS)).items() if k != VERSION_KEY}
    meta = ModelMeta.from_onnx_props(props, strict=True)
    assert meta.schema_version == LEGACY_VERSION
    assert meta.task == "speech-stream" and meta.labels[meta.silence_class] == "_silence_"
    assert 0 < meta.kws_threshold < 1 and meta.kws_smooth_ms > 0
    assert meta.window is None and meta.decoder_window == meta.model_config["decoder_window"]
    assert {k: v for k, v in meta.to_onnx_props().items() if k != VERSION_KEY} == props


def test_a_newer_schema_and_malformed_entries_are_refused_on_reading():
    with pytest.raises(MetaError, match=f"version {SCHEMA_VERSION + 1} is newer.*re-export"):
        ModelMeta.from_onnx_props({VERSION_KEY: str(SCHEMA_VERSION + 1), "task": "toy"})
    with pytest.raises(MetaError, match="silence_class must be an integer"):
        ModelMeta.from_onnx_props({"silence_class": '"x"'})
    with pytest.raises(MetaError, match="kws_threshold must be a finite number"):
        ModelMeta.from_onnx_props({"kws_threshold": "high"})
    kept = ModelMeta.from_onnx_props({"task": "toy", "written_by": "someone"})
    assert kept.unknown == {"written_by": "someone"}
    with pytest.raises(MetaError, match="unknown metadata key 'written_by'"):
        ModelMeta.from_onnx_props({"written_by": "someone"}, strict=True)


@pytest.mark.parametrize(
    "change, needle",
    [
        ({"windw": 250}, "unknown metadata key 'windw'"),  # a renamed key
        ({"channels": "PLETH,II"}, "metadata channels must be a list of strings"),
        ({"sample_rate": -125}, "metadata sample_rate must be a positive number"),
        ({VERSION_KEY: SCHEMA_VERSION + 1}, "re-export the model with this version"),
    ],
)
def test_export_refuses_a_bad_key_with_one_line(tmp_path, change, needle):
    meta = {**vital_meta("hr", ("PLETH", "II"), 250), **change}
    out = tmp_path / "hr.onnx"
    with pytest.raises(MetaError) as e:
        export_model(tiny_model(), out, chunk=125, meta=meta)
    assert needle in str(e.value) and "\n" not in str(e.value)
    assert not out.exists()  # refused before anything was written


def test_export_checkpoint_refuses_a_task_key_training_must_write(tmp_path):
    meta = vital_meta("hr", ("PLETH", "II"), 250)
    meta.update(d_input=2, d_output=1, target_mean=75.0, target_std=10.0)
    ckpt, out = tmp_path / "hr.pt", tmp_path / "hr.onnx"
    save_checkpoint(ckpt, tiny_model(), meta={k: v for k, v in meta.items() if k != "window"})
    with pytest.raises(MetaError, match="bidmc metadata lacks window") as e:
        export_checkpoint(ckpt, out, chunk=125)
    assert "\n" not in str(e.value) and not out.exists()
    save_checkpoint(ckpt, tiny_model(), meta=meta)
    info, _ = export_checkpoint(ckpt, out, chunk=125)
    assert ModelMeta.from_onnx_props(_props(out), strict=True).window == 250


def test_meta_imports_neither_torch_nor_numpy():
    code = (
        "import sys\n"
        "import liquid_stream.runtime.meta, liquid_stream.io.bidmc_vocab\n"
        "bad = sorted(m for m in ('torch', 'numpy') if m in sys.modules)\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
