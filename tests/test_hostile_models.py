"""Hostile model files, exports, kills and caches (issue 60 parts C, D, F and the disk-full
cases of ``kws-tune``, ``export --quantize int8`` and ``kws-eval``).

Everything is real: a small tone spotter trained once and exported (tests/fixtures_kws.py),
a tiny vital-sign model (tests/fixtures_vitals.py), the shipped models, real ``export``
runs (one in a subprocess killed with SIGKILL while it verifies), real onnxruntime
sessions, a real C++ build, and for the disk-full cases a real full file system: a small
tmpfs, mounted when the tests run as root (they skip with a note otherwise).

- **Publishing** (C): ``export --verify`` verifies a hidden sibling and renames it onto
  ``--onnx`` only once it passed: a kill during verification leaves no ``--onnx``, a failed
  verification leaves an old one byte for byte (also ``--quantize int8 --verify``).
  ``kws-tune`` keeps the model's mode and writes through a symlink. Hidden temporaries of
  killed runs are removed by the next write into the folder, never a live run's.
- **Integrity** (D): flipped bytes, a changed, removed or added metadata entry, an int8
  graph whose ``quantization`` entry was removed (with or without the hash) are refused
  in one line naming the file; a graph without the hash loads with a one-line warning;
  duplicate labels are refused; the shipped models carry the hash.
- **Blame** (F): a truncated or emptied cached C++ library is rebuilt (never loaded); bad
  tuned metadata and a state shape that is not the graph's are refused naming the key.
- **Disk full**: one ``Error:`` line, the old files as they were, no half-written output.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from fixtures_kws import train_tone_spotter, write_labels_csv, write_tone_wav
from fixtures_vitals import export_vital_model
from hostile import assert_one_line_error, invoke, small_tmpfs, with_metadata

from liquid_stream import LiquidS4Model, OnnxStreamer
from liquid_stream.io import atomic
from liquid_stream.models import available, shipped
from liquid_stream.nn.checkpoint import save_checkpoint
from liquid_stream.runtime.meta import MetaError, ModelMeta
from liquid_stream.runtime.onnx_streamer import OnnxModelError

TOY_META = {
    "task": "toy",
    "labels": ["silence", "440 Hz", "880 Hz"],
    "sample_rate": 8000,
    "silence_class": 0,
    "input_mean": [0.0],
    "input_std": [1.0],
    "d_input": 1,
    "d_output": 3,
}


# ============================================================================ helpers


def check_integrity(model: onnx.ModelProto) -> bool:
    """liquid_stream.runtime.quantized.check_integrity (imported here: the tests also run, and
    fail, on the code before it)."""
    from liquid_stream.runtime.quantized import check_integrity as check

    return check(model)


def props_of(path: Path) -> dict[str, str]:
    return {p.key: p.value for p in onnx.load(str(path)).metadata_props}


def largest_weight_offset(path: Path) -> tuple[int, int]:
    """(offset, length) in the file of the raw bytes of the largest initializer."""
    m = onnx.load(str(path))
    t = max(m.graph.initializer, key=lambda t: len(t.raw_data))
    raw = path.read_bytes()
    at = raw.find(t.raw_data)
    assert at > 0 and len(t.raw_data) > 200
    return at, len(t.raw_data)


def flip_bytes(src: Path, dst: Path, n: int = 50, seed: int = 0) -> Path:
    """``src`` with ``n`` bytes of its largest weight tensor inverted (a bad disk)."""
    at, length = largest_weight_offset(src)
    raw = bytearray(src.read_bytes())
    for i in np.random.default_rng(seed).choice(length, n, replace=False):
        raw[at + int(i)] ^= 0xFF
    dst.write_bytes(bytes(raw))
    return dst


def hidden(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


@pytest.fixture(scope="module")
def M(tmp_path_factory):
    """The tone spotter (hashed), a stream and labels, a checkpoint, a float vital model."""
    d = tmp_path_factory.mktemp("models")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        info = train_tone_spotter(d / "tone.onnx")
        torch.manual_seed(0)
        model = LiquidS4Model(
            d_input=1,
            d_output=3,
            d_model=8,
            n_layers=1,
            d_state=4,
            liquid="pb",
            liquid_order=2,
            norm="batch",
            decoder="window",
            decoder_window=8,
        )
        save_checkpoint(d / "good.pt", model, TOY_META)
        # the same model with a decoder that overflows float32: verification must fail
        bad = LiquidS4Model(
            d_input=1,
            d_output=3,
            d_model=8,
            n_layers=1,
            d_state=4,
            liquid="pb",
            liquid_order=2,
            norm="batch",
            decoder="window",
            decoder_window=8,
        )
        bad.load_state_dict(model.state_dict())
        with torch.no_grad():
            bad.head.weight.fill_(3e38)
        save_checkpoint(d / "overflow.pt", bad, TOY_META)
        export_vital_model(d / "hr.onnx", "hr")
    finally:
        torch.set_num_threads(threads)
    wav = write_tone_wav(d / "tones.wav")
    labels = write_labels_csv(d / "tones.csv")
    return type(
        "M",
        (),
        dict(
            dir=d,
            tone=info["path"],
            wav=wav,
            labels=labels,
            ckpt=d / "good.pt",
            overflow=d / "overflow.pt",
            hr=d / "hr.onnx",
        ),
    )


# ===================================================== C: publish only verified graphs


@pytest.mark.slow
def test_export_killed_while_verifying_leaves_no_graph_and_the_next_run_cleans_up(M, tmp_path):
    """A real SIGKILL while ``export --verify`` verifies: ``--onnx`` never appears; the
    graph was in a hidden sibling, which the next export into the folder removes."""
    out = tmp_path / "m.onnx"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    cmd = [
        sys.executable,
        "-m",
        "liquid_stream.cli",
        "export",
        str(M.ckpt),
        "--onnx",
        str(out),
        "--chunk",
        "8",
        "--verify",
        "--verify-length",
        "400000",
    ]
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and p.poll() is None:
            # the graph is written (a file of the target's with content): it is verifying
            if any(
                f.name.startswith((".m.onnx", "m.onnx")) and f.stat().st_size > 1000
                for f in tmp_path.iterdir()
                if f.is_file()
            ):
                break
            time.sleep(0.05)
        assert p.poll() is None, p.communicate()
        time.sleep(0.3)
        p.send_signal(signal.SIGKILL)
        p.wait(30)
    finally:
        if p.poll() is None:
            p.kill()
    assert not out.exists(), "an unverified graph was published where the apps load it"
    left = hidden(tmp_path)
    assert left and all(n.startswith(".m.onnx.") and n.endswith(".tmp") for n in left), left
    r = invoke(
        ["export", M.ckpt, "--onnx", out, "--chunk", "8", "--verify", "--verify-length", "500"]
    )
    assert r.exit_code == 0, r.output
    assert out.is_file() and hidden(tmp_path) == []  # the killed run's temporary removed
    assert check_integrity(onnx.load(str(out)))


def test_failed_verify_keeps_the_old_graph(M, tmp_path):
    out = tmp_path / "m.onnx"
    r = invoke(
        ["export", M.ckpt, "--onnx", out, "--chunk", "8", "--verify", "--verify-length", "500"]
    )
    assert r.exit_code == 0, r.output
    good = out.read_bytes()
    r = invoke(
        ["export", M.overflow, "--onnx", out, "--chunk", "8", "--verify", "--verify-length", "500"]
    )
    assert_one_line_error(r, [])
    assert out.read_bytes() == good, "re-exporting over a good graph lost it"
    assert hidden(tmp_path) == []


def test_failed_int8_verify_keeps_the_old_int8_graph(M, tmp_path):
    from liquid_stream.export.pipeline import export_model

    out = tmp_path / "q.onnx"
    r = invoke(
        [
            "export",
            M.tone,
            "--onnx",
            out,
            "--quantize",
            "int8",
            "--verify",
            "--verify-length",
            "1000",
        ]
    )
    assert r.exit_code == 0, r.output
    good = out.read_bytes()
    bad_f32 = tmp_path / "f32" / "overflow.onnx"  # a float graph whose outputs overflow
    model = LiquidS4Model(
        d_input=1,
        d_output=3,
        d_model=8,
        n_layers=1,
        d_state=4,
        liquid="pb",
        liquid_order=2,
        norm="batch",
        decoder="window",
        decoder_window=8,
    )
    with torch.no_grad():
        model.head.weight.fill_(3e38)
    export_model(model, bad_f32, chunk=8, meta=TOY_META)
    r = invoke(
        [
            "export",
            bad_f32,
            "--onnx",
            out,
            "--quantize",
            "int8",
            "--verify",
            "--verify-length",
            "500",
        ]
    )
    assert_one_line_error(r, [])
    assert out.read_bytes() == good
    assert hidden(tmp_path) == []


# ======================================================= C: kws-tune keeps mode and links


def test_kws_tune_keeps_the_mode_and_writes_through_a_symlink(M, tmp_path):
    target = tmp_path / "models" / "tone.onnx"
    target.parent.mkdir()
    shutil.copy(M.tone, target)
    target.chmod(0o644)
    link = tmp_path / "current.onnx"
    link.symlink_to(target)
    r = invoke(["kws-tune", link, "--stream", M.wav, "--labels", M.labels])
    assert r.exit_code == 0, r.output
    assert link.is_symlink() and link.resolve() == target
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    props = props_of(target)
    assert "kws_threshold" in props and "kws_threshold" not in props_of(M.tone)
    assert check_integrity(onnx.load(str(target)))  # stamped anew, loads
    assert hidden(target.parent) == [] and hidden(tmp_path) == []


# ============================================================ C: stale temporaries


def test_stale_temporaries_are_removed_and_live_ones_kept(tmp_path):
    """The rule of liquid_stream/io/atomic.py, with real processes: a dead writer's file
    goes, a live one's stays, another machine's stays, an unmarked one goes only when
    older than STALE_AFTER_S; also the folders of data builds (cache.atomic_dir)."""
    from liquid_stream.training.data.cache import atomic_dir

    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    try:
        host = atomic.HOST
        names = {
            "dead": f".kws.onnx.{host}-{dead.pid}.abcd1234.tmp",
            "live": f".kws.onnx.{host}-{live.pid}.abcd1234.tmp",
            "other_host": ".kws.onnx.0000beef-1.abcd1234.tmp",
            "old": ".kws.onnx.oldx1234.tmp",
            "recent": ".kws.onnx.newx1234.tmp",
            "other_file": ".notes.txt.abcd1234.tmp",
            "dir_dead": f".sim.tmp-{host}-{dead.pid}-abc12345",
            "dir_old": ".sy.tmp-old12345",
            "dir_live": f".sim.tmp-{host}-{live.pid}-def12345",
        }
        for k, n in names.items():
            p = tmp_path / n
            if k.startswith("dir"):
                p.mkdir()
                (p / "part.dat").write_bytes(b"x")
            else:
                p.write_bytes(b"x")
        day_ago = time.time() - atomic.STALE_AFTER_S - 60
        for k in ("old", "dir_old"):
            os.utime(tmp_path / names[k], (day_ago, day_ago))
        atomic.atomic_write_bytes(tmp_path / "kws.onnx", b"new")
        with atomic_dir(tmp_path / "sim") as d:
            (d / "a").write_text("a")
        with atomic_dir(tmp_path / "sy") as d:
            (d / "a").write_text("a")
        left = set(hidden(tmp_path))
        assert left == {
            names[k] for k in ("live", "other_host", "recent", "other_file", "dir_live")
        }, left
        assert (tmp_path / "kws.onnx").read_bytes() == b"new"
    finally:
        live.kill()
        live.wait()


# ================================================================ D: integrity


def test_flipped_bytes_in_a_model_are_refused_naming_the_file(M, tmp_path):
    bad = flip_bytes(M.tone, tmp_path / "flipped.onnx")
    with pytest.raises(OnnxModelError, match="flipped.onnx.*content hash"):
        OnnxStreamer(bad)
    r = invoke(["kws", bad, "--input", M.wav])
    assert_one_line_error(r, ["flipped.onnx", "content hash"])


def test_flipped_bytes_in_the_shipped_spotter_are_refused(tmp_path):
    bad = flip_bytes(shipped("kws-sc10"), tmp_path / "kws-sc10.onnx")
    with pytest.raises(OnnxModelError, match="kws-sc10.onnx.*content hash"):
        OnnxStreamer(bad)


def test_shipped_models_carry_the_content_hash():
    for name in available():
        assert check_integrity(onnx.load(str(shipped(name)))), name


@pytest.mark.parametrize(
    "change, needle",
    [
        ({"kws_threshold": "0.5"}, "'kws_threshold' was added"),
        ({"labels": '["silence", "880 Hz", "440 Hz"]'}, "'labels' does not match"),
        ({"silence_class": None}, "'silence_class' was removed"),
    ],
)
def test_edited_metadata_is_refused_naming_the_entry(M, tmp_path, change, needle):
    bad = with_metadata(M.tone, tmp_path / "edited.onnx", **change)
    r = invoke(["kws", bad, "--input", M.wav])
    assert_one_line_error(r, ["edited.onnx", needle])


def test_int8_check_survives_deleting_its_metadata(M, tmp_path):
    from liquid_stream.export.quantize import quantize_file

    q = tmp_path / "q.onnx"
    quantize_file(M.tone, q)
    OnnxStreamer(q)
    no_quant = with_metadata(q, tmp_path / "no_quant.onnx", quantization=None)
    with pytest.raises(OnnxModelError, match="no_quant.onnx.*'quantization' was removed"):
        OnnxStreamer(no_quant)
    neither = with_metadata(q, tmp_path / "neither.onnx", quantization=None, integrity=None)
    with pytest.raises(OnnxModelError, match="neither.onnx.*int8 nodes.*no quantization"):
        OnnxStreamer(neither)


def test_a_graph_without_the_hash_loads_with_a_one_line_warning(M, tmp_path, capfd):
    old = with_metadata(M.tone, tmp_path / "old_export.onnx", integrity=None)
    capfd.readouterr()
    s = OnnxStreamer(old)
    OnnxStreamer(old)  # once per file and process
    err = [ln for ln in capfd.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and "old_export.onnx" in err[0] and "no content hash" in err[0], err
    y = s.process(np.zeros(80, np.float32))
    assert np.isfinite(y).all()


def test_duplicate_labels_are_refused(M, tmp_path):
    dup = with_metadata(
        M.tone, tmp_path / "dup.onnx", integrity=None, labels='["silence", "440 Hz", "440 Hz"]'
    )
    r = invoke(["kws", dup, "--input", M.wav])
    assert_one_line_error(r, ["dup.onnx", "labels", "distinct"])
    with pytest.raises(MetaError, match="labels must be a list of distinct strings"):
        ModelMeta(labels=["a", "a"])


# =================================================================== F: blame


@pytest.mark.parametrize("key, value", [("kws_threshold", "7"), ("kws_smooth_ms", "-100")])
def test_bad_tuning_metadata_is_refused_naming_file_and_key(M, tmp_path, key, value):
    bad = with_metadata(M.tone, tmp_path / "tuned.onnx", integrity=None, **{key: value})
    r = invoke(["kws", bad, "--input", M.wav])
    assert_one_line_error(r, ["tuned.onnx", key, value])


def test_an_absurd_audio_rate_is_refused_naming_the_key(M, tmp_path):
    """A keyword model declaring 1e12 Hz: refused by name before a resampler of terabytes
    is built (before: the resampler's line, which named the two rates, not the key)."""
    bad = with_metadata(M.tone, tmp_path / "fast.onnx", integrity=None, sample_rate="1e12")
    r = invoke(["kws", bad, "--input", M.wav])
    assert_one_line_error(r, ["fast.onnx", "sample_rate"])


def test_a_state_shape_not_the_graphs_is_named(M, tmp_path):
    spec = json.loads(props_of(M.tone)["state_spec"])
    s0 = spec[0]
    i = next(j for j, d in enumerate(s0["shape"]) if isinstance(d, int))
    s0["shape"][i] += 1
    bad = with_metadata(
        M.tone, tmp_path / "shape.onnx", integrity=None, state_spec=json.dumps(spec)
    )
    r = invoke(["kws", bad, "--input", M.wav])
    line = assert_one_line_error(r, ["shape.onnx", "state_spec", s0["name"]])
    assert "audio processing failed" not in line


def test_a_bad_cached_library_is_rebuilt_not_loaded(tmp_path, monkeypatch):
    """A truncated and an emptied cached .so (a full disk, a killed copy): build() sees
    that the file is not the one its stamp records and compiles it again."""
    import ctypes

    from liquid_stream.runtime import ltc_cpp

    cxx = ltc_cpp.compiler()
    if cxx is None:
        pytest.skip("no C++ compiler")
    monkeypatch.setattr(ltc_cpp, "cache_dir", lambda: tmp_path)
    src = 'extern "C" int answer() { return 42; }\n' + "// padding\n" * 200
    lib = ltc_cpp.build(cxx, src, "probe")
    size = lib.stat().st_size
    assert ltc_cpp.cached_ok(lib)
    for broken in (lib.read_bytes()[: size // 2], b""):
        lib.write_bytes(broken)
        assert not ltc_cpp.cached_ok(lib)
        again = ltc_cpp.build(cxx, src, "probe")
        assert again == lib and lib.stat().st_size == size and ltc_cpp.cached_ok(lib)
    assert ctypes.CDLL(str(lib)).answer() == 42


# ============================================================ disk full (real tmpfs)


@pytest.fixture()
def full_disk(tmp_path):
    """A small tmpfs (mounted as root), to be filled by the test; skips otherwise."""
    with small_tmpfs(tmp_path / "tmpfs", "4m") as mnt:
        yield mnt


def fill(mnt: Path, leave: int = 0) -> None:
    """Fill ``mnt`` up, leaving about ``leave`` bytes free."""
    free = shutil.disk_usage(mnt).free - leave
    with open(mnt / "filler", "wb") as f:
        try:
            f.write(b"\0" * max(0, free))
        except OSError:
            pass
    assert shutil.disk_usage(mnt).free <= max(leave, 0) + 8192


def test_disk_full_during_kws_tune(M, full_disk):
    model = full_disk / "tone.onnx"
    shutil.copy(M.tone, model)
    before = model.read_bytes()
    fill(full_disk)
    r = invoke(["kws-tune", model, "--stream", M.wav, "--labels", M.labels])
    assert_one_line_error(r, ["tone.onnx", "No space left"])
    assert model.read_bytes() == before
    assert hidden(full_disk) == []


def test_disk_full_during_export_quantize(M, full_disk):
    fill(full_disk, leave=4096)
    out = full_disk / "q.onnx"
    r = invoke(["export", M.tone, "--onnx", out, "--quantize", "int8"])
    assert_one_line_error(r, ["q.onnx", "No space left"])
    assert not out.exists() and hidden(full_disk) == []


def test_disk_full_during_kws_eval(M, full_disk):
    fill(full_disk, leave=4096)
    out = full_disk / "eval.json"
    r = invoke(["kws-eval", M.tone, "--stream", M.wav, "--labels", M.labels, "--out", out])
    assert_one_line_error(r, ["eval.json", "No space left"])
    assert sorted(p.name for p in full_disk.iterdir()) == ["filler"]
