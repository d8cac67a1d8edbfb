"""The hostile-input probe as a test: bad inputs × entry points (CLI commands, Python API).

Every case feeds one bad input to one real entry point and asserts either a clean refusal
or correct handling:

- **CLI** (``liquid-stream …`` through click's runner; two cases through the installed
  console script): a non-zero exit, no traceback, the error on ONE line (the last
  non-empty line of the output starts with ``Error:`` and no other line does), naming the
  problem (the field, the file, ``NaN``, ``sample value`` …), and nothing written: the
  folder the command runs in (where every output of the case points) stays empty, and a
  malicious pickle never runs (its marker file is never created).
- **Python API** (``OnnxStreamer.process``, ``StreamingModel.step``, ``LiquidS4Model(...)``,
  ``load_checkpoint`` / ``model_from_checkpoint``, ``KeywordSpotter``, ``VitalsMonitor``): a
  ``ValueError`` (or the module's own error type) whose one-line message names the problem;
  for the streaming runtimes the state is left exactly as it was and finite, and the stream
  then continues as if the refused chunk had never been sent.
- **Correct handling** where the input is odd but usable (a stereo, 8-bit or 44.1 kHz WAV,
  a short NaN gap in a WFDB record, a truncated signal file, a 250 Hz record …): the
  handling is asserted (the tone keywords found at their known times, the gap bridged …).

Everything is real: a small tone spotter trained once and exported to ONNX
(tests/fixtures_kws.py), a tiny vital-sign ONNX model and WFDB records
(tests/fixtures_vitals.py), real WAV / CSV / checkpoint / pickle / ONNX files.

Cases the product still gets wrong are marked ``xfail(strict=True)`` with the reason, so
the suite stays green until they are fixed and then forces the mark off.
"""

from __future__ import annotations

import copy
import os
import pickle
import struct
import subprocess
import sys
import wave
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import scipy.io.wavfile
import torch
from fixtures_kws import (
    EVENTS,
    SR,
    export_regression_model,
    parse_detections,
    tone_signal,
    train_tone_spotter,
    write_labels_csv,
    write_tone_wav,
)
from fixtures_vitals import export_vital_model, signals, truncate_record, write_record
from hostile import assert_one_line_error, invoke, with_metadata

from liquid_stream import LiquidS4Model, OnnxStreamer
from liquid_stream.nn.checkpoint import (
    CheckpointError,
    load_checkpoint,
    model_from_checkpoint,
    save_checkpoint,
)
from liquid_stream.runtime.onnx_streamer import OnnxModelError
from liquid_stream.runtime.validate import StreamInputError

TOL = 0.25  # a tone keyword is detected within [start, start + TOL] s
BAD_S = 5.5  # the NaN / 1e30 sample of the bad WAVs: after three keywords (<= 4.9 s)
MARKER = "PWNED"  # what the malicious pickles would create


# ============================================================================ fixtures


def _small_model(seed: int = 0, **kw) -> LiquidS4Model:
    torch.manual_seed(seed)
    args = dict(
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
    args.update(kw)
    return LiquidS4Model(**args).eval()


def _plain_onnx(path: Path) -> Path:
    """A valid ONNX model that is not a liquid-stream streaming graph (an Identity)."""
    import onnx
    from onnx import TensorProto, helper

    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, None, 1]) for n in "xy"]
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g", io[:1], io[1:])
    onnx.save(helper.make_model(graph), str(path))
    return path


class _Evil:
    """Unpickling this runs ``os.system(touch MARKER)``."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch '{self.marker}'",))


def _header_only_wav(path: Path, rate: int = SR) -> Path:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(b"")
    return path


def _alaw_wav(path: Path) -> Path:
    """A well-formed WAV in an encoding the reader does not decode (A-law, tag 6)."""
    data = bytes(range(256)) * 8
    fmt = struct.pack("<HHIIHH", 6, 1, SR, SR, 1, 8)
    body = b"WAVE" + b"fmt " + struct.pack("<I", 16) + fmt + b"data"
    body += struct.pack("<I", len(data)) + data
    path.write_bytes(b"RIFF" + struct.pack("<I", len(body)) + body)
    return path


def _spike_record(root: Path, name: str, seconds: float = 20, at_s: float = 12.3) -> Path:
    """A WFDB record (format 32, gain 1000) whose PLETH holds one 1e6 sample at ``at_s``:
    a corrupt sample 5·10⁶ PLETH standard deviations out, storable in the format."""
    import wfdb

    sig = signals(seconds)
    ch = ("RESP", "PLETH", "II")
    x = np.stack([sig[c] for c in ch], 1)
    x[int(round(at_s * 125)), 1] = 1e6
    wfdb.wrsamp(
        name,
        fs=125,
        units=["NU", "NU", "mV"],
        sig_name=[f"{c}," for c in ch],
        p_signal=x,
        fmt=["32"] * 3,
        adc_gain=[1000.0] * 3,
        baseline=[0] * 3,
        write_dir=str(root),
    )
    return root / name


@pytest.fixture(scope="session")
def F(tmp_path_factory) -> SimpleNamespace:
    """Every hostile (and every good) input file, made once: read-only for the cases."""
    d = tmp_path_factory.mktemp("hostile")
    f = SimpleNamespace(dir=d, marker=d / MARKER)

    # ---- models: a trained tone spotter (ONNX), a regression model, a vital-sign model
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # faster than 2 on the 2 shared cores
    try:
        info = train_tone_spotter(d / "tone.onnx")
    finally:
        torch.set_num_threads(threads)
    assert info["accuracy"] > 0.9, info
    f.tone = info["path"]
    f.reg = export_regression_model(d / "regression.onnx")
    f.hr, f.rr = d / "hr.onnx", d / "rr.onnx"
    export_vital_model(f.hr, "hr")
    export_vital_model(f.rr, "rr")

    # ---- broken ONNX files
    f.plain_onnx = _plain_onnx(d / "identity.onnx")
    raw = f.tone.read_bytes()
    (d / "truncated.onnx").write_bytes(raw[: len(raw) // 2])
    f.trunc_onnx = d / "truncated.onnx"
    f.meta_spec = with_metadata(f.tone, d / "bad_state_spec.onnx", state_spec="not json")
    f.meta_no_din = with_metadata(f.tone, d / "no_d_input.onnx", d_input=None)
    f.meta_sr = with_metadata(f.tone, d / "sr_text.onnx", sample_rate="fast")
    f.meta_neg_sr = with_metadata(f.tone, d / "sr_negative.onnx", sample_rate="-8000")
    f.meta_silence = with_metadata(f.tone, d / "silence_text.onnx", silence_class='"x"')

    # ---- non-model files
    f.random = d / "random.bin"
    f.random.write_bytes(np.random.default_rng(0).bytes(4096))
    f.text = d / "notes.txt"
    f.text.write_text("these are notes, not a model\n")
    f.empty_dir = d / "empty_dir"
    f.empty_dir.mkdir()
    f.missing = d / "missing"  # never created

    # ---- checkpoints: good, truncated, of the wrong kind, malicious
    f.ckpt = d / "good.pt"
    save_checkpoint(f.ckpt, _small_model(), {"task": "toy"})
    raw = f.ckpt.read_bytes()
    f.trunc_ckpt = d / "truncated.pt"
    f.trunc_ckpt.write_bytes(raw[: len(raw) // 2])
    f.empty_ckpt = d / "empty.pt"
    f.empty_ckpt.write_bytes(b"")
    f.evil_pickle = d / "evil.pt"
    f.evil_pickle.write_bytes(pickle.dumps(_Evil(f.marker)))
    f.evil_zip = d / "evil_zip.pt"
    torch.save({"format": "liquid-stream/checkpoint", "model": _Evil(f.marker)}, f.evil_zip)
    f.plain_ckpt = d / "plain.pt"
    torch.save({"weights": torch.zeros(3)}, f.plain_ckpt)
    good = torch.load(f.ckpt, weights_only=True)
    f.future_ckpt = d / "future.pt"
    torch.save({**good, "version": 99}, f.future_ckpt)
    f.nomodel_ckpt = d / "no_model.pt"
    torch.save({k: v for k, v in good.items() if k != "model"}, f.nomodel_ckpt)
    f.negdim_ckpt = d / "d_model_negative.pt"
    torch.save({**good, "model_config": {**good["model_config"], "d_model": -1}}, f.negdim_ckpt)
    f.mismatch_ckpt = d / "mismatch.pt"
    torch.save({**good, "model_config": {**good["model_config"], "d_model": 16}}, f.mismatch_ckpt)
    assert not f.marker.exists()

    # ---- WAVs: the tone stream (8 kHz, 16-bit) and its variants
    x = tone_signal()
    f.wav = write_tone_wav(d / "tones.wav")
    f.labels = write_labels_csv(d / "tones.csv")
    f.wav_stereo = d / "stereo.wav"  # the tones on channel 0, silence on channel 1
    scipy.io.wavfile.write(
        f.wav_stereo, SR, np.stack([np.round(x * 32767), np.zeros_like(x)], 1).astype(np.int16)
    )
    f.wav_u8 = d / "u8.wav"
    scipy.io.wavfile.write(f.wav_u8, SR, np.clip(np.round(x * 127 + 128), 0, 255).astype(np.uint8))
    f.wav_44k = d / "int16_44100.wav"
    scipy.io.wavfile.write(f.wav_44k, 44100, np.round(tone_signal(44100) * 32767).astype(np.int16))
    for name, value in (("nan", np.nan), ("big", 1e30)):
        y = x.astype(np.float32)
        y[int(BAD_S * SR)] = value
        scipy.io.wavfile.write(d / f"{name}.wav", SR, y)
    f.wav_nan, f.wav_big = d / "nan.wav", d / "big.wav"
    f.wav_zero = _header_only_wav(d / "no_samples.wav")
    f.wav_empty = d / "empty.wav"
    f.wav_empty.write_bytes(b"")
    f.wav_corrupt = d / "corrupt.wav"
    f.wav_corrupt.write_bytes(b"RIFF\x40\x00\x00\x00WAVEjunk" + b"\x00" * 60)
    raw = f.wav.read_bytes()
    f.wav_trunc = d / "truncated.wav"
    f.wav_trunc.write_bytes(raw[: len(raw) // 2])
    f.wav_alaw = _alaw_wav(d / "alaw.wav")

    # ---- label CSVs
    f.csv_nocols = d / "no_columns.csv"
    f.csv_nocols.write_text("start,end,word\n1.5,1.9,440 Hz\n")
    f.csv_badrow = d / "bad_row.csv"
    f.csv_badrow.write_text("start_s,end_s,word,is_keyword\n1.5,abc,440 Hz,1\n")
    f.csv_backwards = d / "backwards.csv"
    f.csv_backwards.write_text("start_s,end_s,word,is_keyword\n2.0,1.0,440 Hz,1\n")
    f.csv_empty = d / "empty.csv"
    f.csv_empty.write_text("")
    f.csv_nokw = d / "no_keywords.csv"  # a non-keyword event and a word the model does not know
    f.csv_nokw.write_text("start_s,end_s,word,is_keyword\n1.5,1.9,440 Hz,0\n3.0,3.5,hello,1\n")

    # ---- WFDB records
    rec = d / "records"
    f.rec = write_record(rec, "bidmc01", seconds=20)
    f.rec_no_ii = write_record(rec, "noii", seconds=10, channels=("RESP", "PLETH", "V"))
    f.rec_no_dat = write_record(rec, "nodat", seconds=10)
    os.remove(str(f.rec_no_dat) + ".dat")
    f.rec_garbage = rec / "garbage"
    (rec / "garbage.hea").write_text("this is not a WFDB header\n")
    f.rec_spike = _spike_record(rec, "spike")
    f.rec_gap = write_record(rec, "gap", seconds=20, nan_spans=[("PLETH", 8.3, 0.5)])
    f.rec_fs250 = write_record(rec, "fs250", seconds=10, fs=250)
    f.rec_trunc = write_record(rec, "trunc", seconds=20)
    truncate_record(f.rec_trunc, 0.5)
    return f


# ============================================================================= helpers


def assert_nothing_written(work: Path, f: SimpleNamespace) -> None:
    assert sorted(p.name for p in work.iterdir()) == []
    assert not f.marker.exists(), "the malicious pickle ran"


def assert_tone_keywords(dets, events=EVENTS) -> None:
    """Exactly the tone keywords of ``events``, each within TOL s after its start."""
    assert [k for _, k in dets] == [e[2] for e in events], dets
    for (t, _), (start, _, _) in zip(dets, events, strict=True):
        assert start <= t <= start + TOL, (t, start)


def expect_refusal(fn, types, needles):
    """``fn()`` must raise one of ``types`` with a one-line message naming every needle.
    (AssertionError otherwise, also when something else is raised: the xfail cases rely
    on it.)"""
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - the type is what is checked
        assert isinstance(e, types), f"{type(e).__name__}: {e}"
        msg = str(e)
        assert msg.strip() and "\n" not in msg.strip(), msg
        for needle in needles:
            assert needle in msg, (needle, msg)
        return e
    raise AssertionError("accepted: no error raised")


def xfail(reason: str):
    return pytest.mark.xfail(strict=True, raises=AssertionError, reason=reason)


def case(id_, *values, marks=()):
    return pytest.param(*values, id=id_, marks=marks)


# ----------------------------------------------------------- known failures (reasons)
# None at present: a case the product gets wrong is marked with xfail("the cause").


# ================================================================== CLI: refusals


def _train(task, *args):
    return lambda f, w: ["train", task, "--out", w / "run", *args]


SPEECH_SMALL = [
    a
    for s in (
        "model.d_model=8",
        "model.n_layers=1",
        "model.d_state=4",
        "train.device=cpu",
        "train.progress=false",
        "data.subset=sc10",
    )
    for a in ("--set", s)
]


def _toy_set(override):
    return _train("toy", "--preset", "tiny", "--max-steps", "1", "--set", override)


def _export(key, *args):
    return lambda f, w: ["export", getattr(f, key), "--onnx", w / "out.onnx", *args]


def _kws(model_key, wav_key="wav", *args):
    return lambda f, w: [
        "kws",
        getattr(f, model_key),
        "--input",
        getattr(f, wav_key),
        "--fast",
        "--no-ui",
        *args,
    ]


def _kws_eval(model_key="tone", wav_key="wav", csv_key="labels", out=True):
    def argv(f, w):
        a = [
            "kws-eval",
            getattr(f, model_key),
            "--stream",
            getattr(f, wav_key),
            "--labels",
            getattr(f, csv_key),
        ]
        return a + (["--out", w / "eval.json"] if out else [])

    return argv


def _kws_tune(model_key="tone", wav_key="wav", csv_key="labels"):
    return lambda f, w: [
        "kws-tune",
        getattr(f, model_key),
        "--stream",
        getattr(f, wav_key),
        "--labels",
        getattr(f, csv_key),
        "--no-write",
        "--out",
        w / "grid.json",
    ]


def _vitals(model_key="hr", rec_key="rec", *args):
    return lambda f, w: [
        "vitals",
        getattr(f, model_key),
        "--record",
        getattr(f, rec_key),
        "--speed",
        "max",
        "--no-ui",
        "--out",
        w / "vitals",
        *args,
    ]


def _kws_stream(root):
    return lambda f, w: [
        "data",
        "kws-stream",
        w / "s.wav",
        "--labels",
        w / "s.csv",
        "--data",
        root(f),
        "--minutes",
        "0.1",
    ]


CLI_ERRORS = [
    # ---- train: config fields (checked before anything is built or written)
    case(
        "train / non-numeric d_model",
        _toy_set("model.d_model=abc"),
        ["model.d_model", "positive integer", "'abc'"],
    ),
    case("train / negative d_model", _toy_set("model.d_model=-4"), ["model.d_model", "-4"]),
    case("train / negative lr", _toy_set("optim.lr=-1"), ["optim.lr", ">= 0", "-1"]),
    case("train / NaN lr", _toy_set("optim.lr=nan"), ["optim.lr", "nan"]),
    case("train / unknown key", _toy_set("model.foo=1"), ["unknown key model.foo"]),
    case(
        "train / bad choice liquid", _toy_set("model.liquid=xyz"), ["model.liquid", "pb", "'xyz'"]
    ),
    case("train / bad choice mode", _toy_set("model.mode=s4"), ["model.mode", "dplr", "diag"]),
    case("train / liquid_order 1", _toy_set("model.liquid_order=1"), ["model.liquid_order"]),
    case(
        "train / override without =",
        _toy_set("model.d_model"),
        ["'model.d_model'", "section.key=value"],
    ),
    case(
        "train / bad frontend",
        _toy_set("model.frontend={kind: logmel, n_mels: -1}"),
        ["frontend.n_mels", "-1"],
    ),
    case(
        "train / d_model 1e9 (2e18 parameters)",
        _toy_set("model.d_model=1e9"),
        ["model.d_model=1000000000", "parameters", "limit of 1e+09"],
    ),
    case("train / unknown task", _train("nosuchtask"), ["nosuchtask", "available"]),
    case(
        "train / unknown preset", _train("toy", "--preset", "nosuch"), ["unknown preset 'nosuch'"]
    ),
    # ---- train: data folders (refused before the run folder is made)
    case(
        "train / missing --data dir",
        lambda f, w: ["train", "speech", "--out", w / "run", "--data", f.missing, *SPEECH_SMALL],
        ["not found", "missing"],
    ),
    case(
        "train / empty --data dir",
        lambda f, w: ["train", "speech", "--out", w / "run", "--data", f.empty_dir, *SPEECH_SMALL],
        ["validation_list.txt", "empty_dir"],
    ),
    case(
        "train / --data is a file",
        lambda f, w: ["train", "speech", "--out", w / "run", "--data", f.text, *SPEECH_SMALL],
        ["--data", "is a file"],
    ),
    case(
        "train / empty bidmc --data dir",
        lambda f, w: ["train", "bidmc", "--out", w / "run", "--data", f.empty_dir],
        ["empty_dir", "BIDMC"],
    ),
    case(
        "train / --resume random bytes",
        lambda f, w: ["train", "toy", "--out", w / "run", "--resume", f.random],
        ["random.bin", "not a readable"],
    ),
    case(
        "train / --resume malicious pickle",
        lambda f, w: ["train", "toy", "--out", w / "run", "--resume", f.evil_pickle],
        ["evil.pt", "not a readable"],
    ),
    # ---- export: every kind of bad checkpoint
    case("export / missing checkpoint", _export("missing"), ["checkpoint not found", "missing"]),
    case("export / random bytes", _export("random"), ["random.bin", "not a readable"]),
    case("export / text file", _export("text"), ["notes.txt", "not a readable"]),
    case("export / malicious pickle", _export("evil_pickle"), ["evil.pt", "not a readable"]),
    case(
        "export / malicious pickle in a torch zip",
        _export("evil_zip"),
        ["evil_zip.pt", "not a readable"],
    ),
    case("export / truncated checkpoint", _export("trunc_ckpt"), ["truncated.pt", "truncated"]),
    case("export / empty file", _export("empty_ckpt"), ["empty.pt", "not a readable"]),
    case("export / torch file of another kind", _export("plain_ckpt"), ["plain.pt", "format tag"]),
    case("export / future checkpoint version", _export("future_ckpt"), ["future.pt", "99"]),
    case(
        "export / checkpoint without weights", _export("nomodel_ckpt"), ["no_model.pt", "'model'"]
    ),
    case(
        "export / weights of another size",
        _export("mismatch_ckpt"),
        ["mismatch.pt", "does not match its model config"],
    ),
    case("export / negative d_model in the checkpoint config", _export("negdim_ckpt"), ["d_model"]),
    case("export / directory", _export("empty_dir"), ["is a directory"]),
    case("export / chunk 0", _export("ckpt", "--chunk", "0"), ["--chunk", "0"]),
    # ---- evaluate
    case(
        "evaluate / malicious pickle",
        lambda f, w: ["evaluate", f.evil_pickle],
        ["evil.pt", "not a readable"],
    ),
    case(
        "evaluate / truncated checkpoint", lambda f, w: ["evaluate", f.trunc_ckpt], ["truncated.pt"]
    ),
    # ---- kws: models
    case("kws / missing model", _kws("missing"), ["model not found", "missing"]),
    case("kws / random bytes as model", _kws("random"), ["random.bin", "not a valid ONNX"]),
    case("kws / checkpoint as model", _kws("ckpt"), ["good.pt", "not a valid ONNX"]),
    case("kws / truncated ONNX", _kws("trunc_onnx"), ["truncated.onnx", "not a valid ONNX"]),
    case(
        "kws / ONNX of another program",
        _kws("plain_onnx"),
        ["identity.onnx", "not a liquid-stream streaming model"],
    ),
    case("kws / regression model", _kws("reg"), ["regression.onnx", "regression model"]),
    case("kws / vital-sign model", _kws("hr"), ["hr.onnx", "not a keyword classifier"]),
    case("kws / ONNX state_spec not JSON", _kws("meta_spec"), ["bad_state_spec.onnx"]),
    case("kws / ONNX without d_input", _kws("meta_no_din"), ["no_d_input.onnx", "d_input"]),
    case("kws / ONNX sample_rate not a number", _kws("meta_sr"), ["sr_text.onnx", "sample"]),
    case("kws / ONNX negative sample_rate", _kws("meta_neg_sr"), ["sr_negative.onnx", "sample"]),
    case(
        "kws / ONNX silence_class not an int",
        _kws("meta_silence"),
        ["silence_text.onnx", "silence"],
    ),
    case(
        "kws / unknown keyword",
        _kws("tone", "wav", "--keywords", "hello"),
        ["unknown keyword", "hello"],
    ),
    case("kws / threshold 2", _kws("tone", "wav", "--threshold", "2"), ["--threshold"]),
    # ---- kws: WAVs
    case("kws / missing WAV", _kws("tone", "missing"), ["audio file not found"]),
    case("kws / empty WAV file", _kws("tone", "wav_empty"), ["empty.wav", "not a WAV"]),
    case("kws / random bytes as WAV", _kws("tone", "random"), ["random.bin", "not a WAV"]),
    case("kws / corrupt WAV", _kws("tone", "wav_corrupt"), ["corrupt.wav", "malformed WAV"]),
    case("kws / truncated WAV", _kws("tone", "wav_trunc"), ["truncated.wav", "truncated WAV"]),
    case("kws / A-law WAV", _kws("tone", "wav_alaw"), ["alaw.wav", "unsupported WAV encoding"]),
    case(
        "kws / NaN sample in WAV", _kws("tone", "wav_nan"), ["nan.wav", f"at {BAD_S:.3f} s", "NaN"]
    ),
    case(
        "kws / 1e30 sample in WAV",
        _kws("tone", "wav_big"),
        ["big.wav", f"at {BAD_S:.3f} s", "sample value 1e+30", "outside the accepted range"],
    ),
    # ---- kws-eval
    case("kws-eval / missing model", _kws_eval("missing"), ["model not found"]),
    case("kws-eval / regression model", _kws_eval("reg"), ["regression model"]),
    case("kws-eval / corrupt WAV", _kws_eval(wav_key="wav_corrupt"), ["corrupt.wav"]),
    case("kws-eval / truncated WAV", _kws_eval(wav_key="wav_trunc"), ["truncated WAV"]),
    case("kws-eval / empty WAV file", _kws_eval(wav_key="wav_empty"), ["empty.wav", "not a WAV"]),
    case("kws-eval / WAV without samples", _kws_eval(wav_key="wav_zero"), ["no_samples.wav"]),
    case(
        "kws-eval / NaN sample in WAV",
        _kws_eval(wav_key="wav_nan", out=False),
        ["nan.wav", f"at {BAD_S:.3f} s", "NaN"],
    ),
    case(
        "kws-eval / 1e30 sample in WAV",
        _kws_eval(wav_key="wav_big", out=False),
        ["big.wav", "sample value 1e+30"],
    ),
    case(
        "kws-eval / labels missing columns",
        _kws_eval(csv_key="csv_nocols"),
        ["no_columns.csv", "start_s,end_s,word,is_keyword"],
    ),
    case(
        "kws-eval / labels bad row",
        _kws_eval(csv_key="csv_badrow"),
        ["bad_row.csv:2", "bad row", "'abc'"],
    ),
    case(
        "kws-eval / labels end before start",
        _kws_eval(csv_key="csv_backwards"),
        ["backwards.csv:2", "end_s before start_s"],
    ),
    case(
        "kws-eval / empty labels file",
        _kws_eval(csv_key="csv_empty"),
        ["empty.csv", "expected a CSV"],
    ),
    case("kws-eval / missing labels", _kws_eval(csv_key="missing"), ["labels file not found"]),
    # ---- kws-tune
    case(
        "kws-tune / NaN sample in WAV", _kws_tune(wav_key="wav_nan"), [f"at {BAD_S:.3f} s", "NaN"]
    ),
    case("kws-tune / regression model", _kws_tune("reg"), ["regression model"]),
    case("kws-tune / labels bad row", _kws_tune(csv_key="csv_badrow"), ["bad_row.csv:2"]),
    case("kws-tune / WAV without samples", _kws_tune(wav_key="wav_zero"), ["no_samples.wav"]),
    case(
        "kws-tune / labels without a keyword of the model",
        _kws_tune(csv_key="csv_nokw"),
        ["no keyword event", "440 Hz"],
    ),
    # ---- data kws-stream / speech-synth
    case(
        "kws-stream / missing data dir",
        _kws_stream(lambda f: f.missing),
        ["Speech Commands root not found", "missing"],
    ),
    case(
        "kws-stream / empty data dir",
        _kws_stream(lambda f: f.empty_dir),
        ["testing_list.txt", "not a Speech Commands"],
    ),
    case(
        "speech-synth / per-word 0",
        lambda f, w: ["data", "speech-synth", w / "synth", "--per-word", "0"],
        ["--per-word", "0"],
    ),
    case(
        "speech-synth / unknown word",
        lambda f, w: [
            "data",
            "speech-synth",
            w / "synth",
            "--per-word",
            "3",
            "--words",
            "yes,banana",
        ],
        ["--words", "banana"],
    ),
    # ---- vitals
    case("vitals / missing record", _vitals(rec_key="missing"), ["record not found"]),
    case(
        "vitals / record lacking channel II",
        _vitals(rec_key="rec_no_ii"),
        ["noii", "'II'", "hr.onnx"],
    ),
    case(
        "vitals / record without its .dat", _vitals(rec_key="rec_no_dat"), ["nodat.dat", "missing"]
    ),
    case("vitals / garbage header", _vitals(rec_key="rec_garbage"), ["garbage.hea"]),
    case("vitals / keyword model", _vitals("tone"), ["tone.onnx", "not a vital-sign model"]),
    case("vitals / regression model of no target", _vitals("reg"), ["regression.onnx"]),
    case("vitals / random bytes as model", _vitals("random"), ["random.bin", "not a valid ONNX"]),
    case("vitals / missing model", _vitals("missing"), ["ONNX model not found"]),
    case(
        "vitals / ONNX of another program",
        _vitals("plain_onnx"),
        ["identity.onnx", "not a liquid-stream"],
    ),
    case("vitals / ONNX state_spec not JSON", _vitals("meta_spec"), ["bad_state_spec.onnx"]),
    case(
        "vitals / same vital twice",
        lambda f, w: [
            "vitals",
            f.hr,
            f.hr,
            "--record",
            f.rec,
            "--speed",
            "max",
            "--no-ui",
            "--out",
            w / "vitals",
        ],
        ["two models estimate hr"],
    ),
    case(
        "vitals / alarm on an unknown vital",
        _vitals("hr", "rec", "--alarm", "bp>120"),
        ["unknown vital 'bp'"],
    ),
    case(
        "vitals / alarm without its model",
        _vitals("hr", "rec", "--alarm", "rr>30"),
        ["rr>30", "needs a rr model"],
    ),
    case("vitals / speed 0", _vitals("hr", "rec", "--speed", "0"), ["--speed", "> 0"]),
]


@pytest.mark.slow
@pytest.mark.parametrize("argv, needles", CLI_ERRORS)
def test_cli_refuses(F, work, argv, needles):
    r = invoke(argv(F, work))
    assert_one_line_error(r, needles)
    assert_nothing_written(work, F)


# ============================================================ CLI: correct handling


@pytest.mark.parametrize(
    "wav_key, note",
    [
        case("kws / stereo WAV uses channel 0", "wav_stereo", "2 channels, using channel 0"),
        case("kws / 8-bit WAV", "wav_u8", None),
        case("kws / int16 WAV at 44.1 kHz is resampled", "wav_44k", "resampled 44100 → 8000 Hz"),
    ],
)
def test_cli_kws_decodes_odd_wavs(F, work, wav_key, note):
    r = invoke(_kws("tone", wav_key)(F, work))
    assert r.exit_code == 0 and r.exception is None, r.output
    assert_tone_keywords(parse_detections(r.output, with_score=False))
    if note:
        assert note in r.output
    assert "5 detection(s) in 9.5 s of audio" in r.output
    assert_nothing_written(work, F)


def test_cli_kws_wav_without_samples_is_no_audio(F, work):
    """A header-only WAV: 0 detections in 0.0 s, or a one-line error naming the file."""
    r = invoke(_kws("tone", "wav_zero")(F, work))
    if r.exit_code == 0:
        assert r.exception is None and parse_detections(r.output, with_score=False) == [], r.output
        assert "0 detection(s) in 0.0 s of audio" in r.output
    else:
        assert_one_line_error(r, ["no_samples.wav"])


def test_cli_kws_refused_sample_keeps_what_came_before(F, work):
    """The keywords before the NaN are printed, then the summary, then one error line."""
    r = invoke(_kws("tone", "wav_nan")(F, work))
    assert_one_line_error(r, ["nan.wav", f"input refused at {BAD_S:.3f} s"])
    before = [e for e in EVENTS if e[0] + e[1] < BAD_S]
    assert_tone_keywords(parse_detections(r.output, with_score=False), before)
    assert "stopped at a refused sample: 3 detection(s) in 5.5 s of audio" in r.output


def test_cli_kws_eval_scores_the_audio_before_a_refused_sample(F, work):
    import json

    out = work / "eval.json"
    r = invoke(_kws_eval(wav_key="wav_big")(F, work))
    assert_one_line_error(r, ["big.wav", "sample value 1e+30"])
    res = json.loads(out.read_text())
    assert res["partial"] is True and res["duration_s"] == pytest.approx(BAD_S, abs=1e-3)
    assert (res["targets"], res["detected"], res["false_accepts"]) == (3, 3, 0)
    assert "sample value 1e+30" in res["error"]


def _vitals_summary(work: Path, name: str) -> dict:
    import json

    return json.loads((work / "vitals" / f"{name}_summary.json").read_text())


def _vitals_statuses(work: Path, name: str) -> list[str]:
    import csv

    with open(work / "vitals" / f"{name}_vitals.csv", newline="") as fh:
        return [row["hr_status"] for row in csv.DictReader(fh)]


def test_cli_vitals_bridges_a_short_nan_gap(F, work):
    """A 0.5 s NaN gap in PLETH at 8.3 s: interpolated; the 2-s window covers it in
    seconds 9 and 10 (bridged, not valid), every other second after warm-up is ok."""
    r = invoke(_vitals(rec_key="rec_gap")(F, work))
    assert r.exit_code == 0, r.output
    s = _vitals_summary(work, "gap")
    assert s["gaps"]["hr"]["short_gaps"] == 1 and s["gaps"]["hr"]["long_gaps"] == 0
    assert s["gaps"]["hr"]["short_gap_s"] == pytest.approx(0.5, abs=0.01)
    assert _vitals_statuses(work, "gap") == ["warmup"] + ["ok"] * 7 + ["bridged"] * 2 + ["ok"] * 10
    assert "1 short, interpolated" in r.output


def test_cli_vitals_out_of_range_sample_in_the_record(F, work):
    """A corrupt 1e6 PLETH sample at 12.3 s (5·10⁶ σ): either a one-line error naming the
    sample value, or the sample handled as a gap (counted, estimates flagged) — never a
    traceback."""
    r = invoke(_vitals(rec_key="rec_spike")(F, work))
    if r.exit_code != 0:
        assert_one_line_error(r, ["spike", "sample value"])
        return
    assert r.exception is None, r.output
    s = _vitals_summary(work, "spike")
    gaps = s["gaps"]["hr"]
    assert gaps["short_gaps"] + gaps["long_gaps"] >= 1, s
    statuses = _vitals_statuses(work, "spike")
    assert statuses[12] != "ok" and statuses[:12] == ["warmup"] + ["ok"] * 11, statuses


def test_cli_vitals_resamples_a_250_hz_record(F, work):
    r = invoke(_vitals(rec_key="rec_fs250")(F, work))
    assert r.exit_code == 0, r.output
    assert "record at 250 Hz, models at 125 Hz: resampling x1/2" in r.output
    s = _vitals_summary(work, "fs250")
    assert s["resampled"] and s["seconds"] == 10 and s["metrics"]["hr"]["valid"] >= 8


def test_cli_vitals_streams_what_a_truncated_record_holds(F, work):
    r = invoke(_vitals(rec_key="rec_trunc")(F, work))
    assert r.exit_code == 0, r.output
    assert "record trunc is truncated" in r.output and "streaming those" in r.output
    s = _vitals_summary(work, "trunc")
    assert s["truncated"] and s["seconds"] == 10


# ========================================================= CLI: the console script


@pytest.mark.parametrize(
    "argv, needles",
    [
        case(
            "liquid-stream export / malicious pickle",
            _export("evil_pickle"),
            ["evil.pt", "not a readable"],
        ),
        case(
            "liquid-stream kws / 1e30 sample in WAV",
            _kws("tone", "wav_big"),
            ["big.wav", "sample value 1e+30"],
        ),
    ],
)
@pytest.mark.slow
def test_console_script_refuses(F, work, argv, needles):
    """The installed script: exit 1, no traceback anywhere, one error line on stderr."""
    script = Path(sys.executable).parent / "liquid-stream"
    p = subprocess.run(
        [str(script), *map(str, argv(F, work))],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=work,
    )
    assert p.returncode == 1, (p.stdout, p.stderr)
    assert "Traceback" not in p.stdout + p.stderr
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert lines and lines[-1].startswith("Error: "), p.stderr
    assert sum(ln.startswith("Error:") for ln in lines) == 1, p.stderr
    for needle in needles:
        assert needle in lines[-1]
    assert_nothing_written(work, F)


# =========================================================== API: OnnxStreamer.process


def _audio_chunks(n: int = 3, length: int = 80, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [(0.1 * rng.standard_normal((length, 1))).astype(np.float32) for _ in range(n)]


def _with(value, at: int = 7) -> np.ndarray:
    x = _audio_chunks(1, seed=9)[0]
    x[at, 0] = value
    return x


ONNX_BAD = [
    case("OnnxStreamer.process / NaN", _with(np.nan), ["input step 7", "NaN"]),
    case("OnnxStreamer.process / +inf", _with(np.inf), ["input step 7", "inf"]),
    case("OnnxStreamer.process / -inf", _with(-np.inf), ["input step 7", "-inf"]),
    case("OnnxStreamer.process / 1e20", _with(1e20), ["sample value 1e+20", "outside"]),
    case("OnnxStreamer.process / int64 1e18", np.full((4, 1), 10**18), ["sample value 1e+18"]),
    case(
        "OnnxStreamer.process / two channels",
        np.zeros((80, 2), np.float32),
        ["1 input channel(s)", "got 2"],
    ),
    case(
        "OnnxStreamer.process / 4-D",
        np.zeros((1, 1, 80, 1), np.float32),
        ["expected input of shape", "(1, 1, 80, 1)"],
    ),
    case(
        "OnnxStreamer.process / wrong batch",
        np.zeros((3, 80, 1), np.float32),
        ["holds 3 stream(s)", "state holds 1"],
    ),
    case("OnnxStreamer.process / string", "abc", ["expected input of shape"]),
    case(
        "OnnxStreamer.process / array of strings", np.array([["0.1"], ["0.2"]]), ["numeric", "<U3"]
    ),
    case(
        "OnnxStreamer.process / None values",
        np.array([[0.1], [None]], dtype=object),
        ["numeric", "object"],
    ),
    case("OnnxStreamer.process / booleans", np.ones((8, 1), bool), ["numeric", "bool"]),
    case("OnnxStreamer.process / complex", np.full((8, 1), 0.1 + 1e30j), ["complex"]),
]


@pytest.fixture(scope="session")
def onnx_reference(F):
    good = _audio_chunks()
    ref = OnnxStreamer(F.tone, threads=1)
    return good, [ref.process(g) for g in good]


def _snapshot(state: dict) -> dict:
    return {k: (v.clone() if torch.is_tensor(v) else v.copy()) for k, v in state.items()}


def _assert_same_state(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        va, vb = (v.detach().cpu().numpy() if torch.is_tensor(v) else v for v in (a[k], b[k]))
        assert va.dtype == vb.dtype and np.array_equal(va, vb), k
        if np.issubdtype(va.dtype, np.floating):
            assert np.isfinite(va).all(), k


@pytest.mark.parametrize("chunk, needles", ONNX_BAD)
def test_onnx_streamer_refuses_and_state_is_kept(F, onnx_reference, chunk, needles):
    good, expected = onnx_reference
    s = OnnxStreamer(F.tone, threads=1)
    np.testing.assert_array_equal(s.process(good[0]), expected[0])
    before = _snapshot(s.state)
    err = expect_refusal(lambda: s.process(chunk), StreamInputError, needles)
    assert "state left unchanged" in str(err)
    _assert_same_state(s.state, before)
    np.testing.assert_array_equal(s.process(good[1]), expected[1])  # as if never sent
    np.testing.assert_array_equal(s.process(good[2]), expected[2])


@pytest.mark.parametrize(
    "key, needles",
    [
        case("OnnxStreamer() / missing file", "missing", ["ONNX model not found"]),
        case("OnnxStreamer() / random bytes", "random", ["random.bin", "not a valid ONNX"]),
        case("OnnxStreamer() / text file", "text", ["notes.txt", "not a valid ONNX"]),
        case("OnnxStreamer() / checkpoint", "ckpt", ["good.pt", "not a valid ONNX"]),
        case("OnnxStreamer() / truncated ONNX", "trunc_onnx", ["truncated.onnx"]),
        case("OnnxStreamer() / ONNX of another program", "plain_onnx", ["no state_spec"]),
        case("OnnxStreamer() / state_spec not JSON", "meta_spec", ["bad_state_spec.onnx"]),
        case("OnnxStreamer() / no d_input", "meta_no_din", ["d_input"]),
        case("OnnxStreamer() / sample_rate not a number", "meta_sr", ["sample_rate"]),
    ],
)
def test_onnx_streamer_refuses_bad_files(F, key, needles):
    expect_refusal(lambda: OnnxStreamer(getattr(F, key), threads=1), OnnxModelError, needles)


# ========================================================= API: StreamingModel.step


@pytest.fixture(scope="session")
def streaming():
    sm = _small_model().streaming()
    rng = torch.Generator().manual_seed(3)
    good = [torch.randn(1, 20, 1, generator=rng) for _ in range(2)]
    with torch.no_grad():
        y0, s0 = sm(good[0], sm.init_state(1))
        y1, _ = sm(good[1], s0)
    return sm, good, y1


def _foreign_state(**kw) -> dict:
    return _small_model(**kw).streaming().init_state(1)


def _bad_value(value):
    x = torch.randn(1, 20, 1, generator=torch.Generator().manual_seed(4))
    x[0, 5, 0] = value
    return x


X = torch.zeros(1, 20, 1)
STREAM_BAD = [
    # (x, state or None for the stream's own, needles)
    case("StreamingModel / NaN", _bad_value(float("nan")), None, ["input step 5", "NaN"]),
    case("StreamingModel / inf", _bad_value(float("inf")), None, ["input step 5", "inf"]),
    case("StreamingModel / 1e20", _bad_value(1e20), None, ["sample value 1e+20"]),
    case("StreamingModel / T=0", torch.zeros(1, 0, 1), None, ["no time steps"]),
    case("StreamingModel / wrong width", torch.zeros(1, 20, 2), None, ["1 input channel(s)"]),
    case(
        "StreamingModel / wrong batch",
        torch.zeros(2, 20, 1),
        None,
        ["holds 2 stream(s)", "state holds 1"],
    ),
    case("StreamingModel / 2-D input", torch.zeros(20, 1), None, ["expected input of shape"]),
    case(
        "StreamingModel / float64",
        torch.zeros(1, 20, 1, dtype=torch.float64),
        None,
        ["torch.float32", "torch.float64"],
    ),
    case("StreamingModel / int64", torch.zeros(1, 20, 1, dtype=torch.int64), None, ["torch.int64"]),
    case(
        "StreamingModel / numpy input",
        np.zeros((1, 20, 1), np.float32),
        None,
        ["torch.Tensor", "ndarray"],
    ),
    case("StreamingModel / state not a dict", X, lambda: [], ["dict of init_state", "list"]),
    case(
        "StreamingModel / foreign state, extra key",
        X,
        lambda: {**_foreign_state(), "zzz": torch.zeros(1)},
        ["does not belong", "zzz"],
    ),
    case(
        "StreamingModel / foreign state, missing key",
        X,
        lambda: {k: v for k, v in _foreign_state().items() if k != "decoder.history"},
        ["does not belong", "decoder.history"],
    ),
    case(
        "StreamingModel / foreign state, other window",
        X,
        lambda: _foreign_state(decoder_window=16),
        ["state"],
    ),
    case(
        "StreamingModel / foreign state, other d_model",
        X,
        lambda: _foreign_state(d_model=16),
        ["state"],
    ),
    case(
        "StreamingModel / state in float64",
        X,
        lambda: {
            k: v.double() if v.is_floating_point() else v for k, v in _foreign_state().items()
        },
        ["state"],
    ),
]


@pytest.mark.parametrize("x, make_state, needles", STREAM_BAD)
def test_streaming_model_refuses_and_state_is_kept(streaming, x, make_state, needles):
    sm, good, y1 = streaming
    with torch.no_grad():
        _, own = sm(good[0], sm.init_state(1))
        before = _snapshot(own)
        state = own if make_state is None else make_state()
        given = _snapshot(state) if isinstance(state, dict) else None
        err = expect_refusal(lambda: sm(x, state), StreamInputError, needles)
        assert "state left unchanged" in str(err)
        if given is not None:
            _assert_same_state(state, given)  # the caller's state is never modified
        _assert_same_state(own, before)
        y, _ = sm(good[1], own)  # the stream goes on as if the chunk had never come
    torch.testing.assert_close(y, y1, rtol=0, atol=0)


@pytest.mark.parametrize(
    "kwargs, needles",
    [
        case("model.streaming / rate NaN", {"rate": float("nan")}, ["rate"]),
        case("model.streaming / rate inf", {"rate": float("inf")}, ["rate"]),
        case("model.streaming / sub_block 3", {"sub_block": 3}, ["sub_block", "power of two"]),
    ],
)
def test_streaming_arguments(kwargs, needles):
    expect_refusal(lambda: _small_model().streaming(**kwargs), ValueError, needles)


def test_bidirectional_model_cannot_stream():
    m = LiquidS4Model(1, 3, d_model=8, n_layers=1, d_state=4, bidirectional=True)
    expect_refusal(m.streaming, ValueError, ["bidirectional", "cannot be streamed"])


# ====================================================== API: LiquidS4Model(...) args


@pytest.mark.parametrize(
    "kwargs, needles",
    [
        case("LiquidS4Model / d_model=-1", {"d_model": -1}, ["d_model"]),
        case("LiquidS4Model / d_model=0", {"d_model": 0}, ["d_model", "0"]),
        case("LiquidS4Model / n_layers=0", {"n_layers": 0}, ["n_layers"]),
        case("LiquidS4Model / d_output=0", {"d_output": 0}, ["d_output"]),
        case("LiquidS4Model / d_state=1", {"d_state": 1}, ["d_state"]),
        case("LiquidS4Model / liquid='xyz'", {"liquid": "xyz"}, ["liquid", "'xyz'"]),
        case(
            "LiquidS4Model / liquid_order=1",
            {"liquid": "pb", "liquid_order": 1},
            ["liquid_order", "1"],
        ),
        case("LiquidS4Model / mode='s4'", {"mode": "s4"}, ["mode", "'s4'"]),
        case("LiquidS4Model / decoder='mean'", {"decoder": "mean"}, ["decoder", "'mean'"]),
        case(
            "LiquidS4Model / decoder_window=0",
            {"decoder": "window", "decoder_window": 0},
            ["decoder_window"],
        ),
        case("LiquidS4Model / dt_min > dt_max", {"dt_min": 0.5, "dt_max": 0.1}, ["dt_min", "0.5"]),
        case("LiquidS4Model / norm='group'", {"norm": "group"}, ["norm", "'group'"]),
        case("LiquidS4Model / output_scale=0", {"output_scale": 0.0}, ["output_scale"]),
        case(
            "LiquidS4Model / frontend kind mfcc",
            {"frontend": {"kind": "mfcc"}},
            ["frontend.kind", "'mfcc'"],
        ),
        case(
            "LiquidS4Model / frontend n_mels=-3",
            {"frontend": {"kind": "logmel", "n_mels": -3}},
            ["frontend.n_mels", "-3"],
        ),
        case(
            "LiquidS4Model / frontend unknown field",
            {"frontend": {"kind": "logmel", "bogus": 1}},
            ["frontend", "bogus"],
        ),
        case("LiquidS4Model / frontend not a dict", {"frontend": "logmel"}, ["frontend"]),
        case(
            "LiquidS4Model / log-mel front end on 2 inputs",
            {"d_input": 2, "frontend": {"kind": "logmel"}},
            ["log-mel", "d_input"],
        ),
    ],
)
def test_model_constructor_refuses(kwargs, needles):
    args = {"d_input": 1, "d_output": 3, "d_model": 8, "n_layers": 1, "d_state": 4, **kwargs}
    expect_refusal(lambda: LiquidS4Model(**args), (ValueError, TypeError), needles)


# ========================================== API: load_checkpoint / model_from_checkpoint


@pytest.mark.parametrize(
    "key, needles",
    [
        case("load_checkpoint / missing", "missing", ["checkpoint not found"]),
        case("load_checkpoint / directory", "empty_dir", ["empty_dir"]),
        case("load_checkpoint / empty file", "empty_ckpt", ["empty.pt", "not a readable"]),
        case("load_checkpoint / random bytes", "random", ["random.bin", "not a readable"]),
        case("load_checkpoint / text file", "text", ["notes.txt", "not a readable"]),
        case("load_checkpoint / truncated", "trunc_ckpt", ["truncated.pt", "truncated"]),
        case("load_checkpoint / malicious pickle", "evil_pickle", ["evil.pt"]),
        case("load_checkpoint / malicious pickle in a torch zip", "evil_zip", ["evil_zip.pt"]),
        case("load_checkpoint / ONNX file", "tone", ["tone.onnx", "not a readable"]),
        case("load_checkpoint / torch file of another kind", "plain_ckpt", ["format tag"]),
        case("load_checkpoint / future version", "future_ckpt", ["version 99"]),
        case("load_checkpoint / no weights", "nomodel_ckpt", ["incomplete", "'model'"]),
    ],
)
def test_load_checkpoint_refuses(F, key, needles):
    expect_refusal(lambda: load_checkpoint(getattr(F, key)), CheckpointError, needles)
    assert not F.marker.exists(), "the malicious pickle ran"


@pytest.mark.parametrize(
    "key, needles",
    [
        case(
            "model_from_checkpoint / weights of another size",
            "mismatch_ckpt",
            ["does not match its model config", "size mismatch"],
        ),
        case("model_from_checkpoint / negative d_model", "negdim_ckpt", ["d_model"]),
    ],
)
def test_model_from_checkpoint_refuses(F, key, needles):
    expect_refusal(lambda: model_from_checkpoint(getattr(F, key)), CheckpointError, needles)


def test_good_checkpoint_round_trips(F):
    """The control: the files above are refused for what they are, not for where they lie."""
    model, meta = model_from_checkpoint(F.ckpt)
    assert meta == {"task": "toy"} and model.config["d_model"] == 8


# ============================================================ API: the apps' runtimes


def test_keyword_spotter_refuses_nan_and_goes_on(F):
    from liquid_stream.apps.common.audio import read_wav
    from liquid_stream.apps.kws.spotter import KeywordSpotter, KwsInputError

    x, _, _ = read_wav(F.wav)
    ref = KeywordSpotter(F.tone, threads=1).run(x)
    sp = KeywordSpotter(F.tone, threads=1)
    cut = 4 * SR  # after the first two keywords
    dets = sp.run(x[:cut])
    t, scores = sp.time_s, dict(sp.scores)
    bad = x[cut : cut + 80].copy()
    bad[13] = np.nan
    err = expect_refusal(lambda: sp.predict(bad), KwsInputError, ["NaN"])
    assert err.time_s == pytest.approx((cut + 13) / SR)
    assert sp.time_s == t and sp.scores == scores  # nothing moved
    dets += sp.run(x[cut:])
    assert [(d.keyword, d.time_s) for d in dets] == [(d.keyword, d.time_s) for d in ref]
    assert_tone_keywords([(d.time_s, d.keyword) for d in dets])
    expect_refusal(lambda: sp.predict(np.zeros((80, 2), np.float32)), ValueError, ["mono"])


@pytest.fixture(scope="session")
def vital_chunks():
    sig = signals(20)
    x = np.stack([sig[c] for c in ("PLETH", "II")], 1)
    return [x[k * 125 : (k + 1) * 125] for k in range(20)]


def _estimates(ests):
    return [(e.time_s, e.status["hr"], e.values["hr"]) for e in ests]


def test_vitals_monitor_refuses_an_out_of_range_chunk_and_goes_on(F, vital_chunks):
    from liquid_stream.apps.vitals.monitor import VitalsMonitor

    ref = VitalsMonitor([F.hr])
    expected = _estimates([e for c in vital_chunks for e in ref.push(c)])
    mon = VitalsMonitor([F.hr])
    got = [e for c in vital_chunks[:10] for e in mon.push(c)]
    bad = vital_chunks[10].copy()
    bad[10, 0] = 1e30
    expect_refusal(lambda: mon.push(bad), ValueError, ["sample value 1e+30"])
    got += [e for c in vital_chunks[10:] for e in mon.push(c)]
    assert _estimates(got) == expected


def test_vitals_monitor_refused_chunk_changes_no_lane(F):
    """hr (PLETH, II) and rr (RESP, PLETH): a 1e30 RESP sample is refused by the rr model
    only; the hr model must not have consumed the chunk either."""
    from liquid_stream.apps.vitals.monitor import VitalsMonitor

    ref = VitalsMonitor([F.hr, F.rr])
    sig = signals(20)
    x = np.stack([sig[c] for c in ref.channels], 1)
    chunks = [x[k * 125 : (k + 1) * 125] for k in range(20)]
    expected = [(e.time_s, e.status, e.values) for c in chunks for e in ref.push(c)]
    mon = VitalsMonitor([F.hr, F.rr])
    got = [e for c in chunks[:10] for e in mon.push(c)]
    bad = chunks[10].copy()
    bad[10, mon.channels.index("RESP")] = 1e30
    expect_refusal(lambda: mon.push(bad), ValueError, ["sample value 1e+30"])
    got += [e for c in chunks[10:] for e in mon.push(c)]
    assert mon.samples_in == ref.samples_in
    assert [(e.time_s, e.status, e.values) for e in got] == expected


def test_vitals_monitor_treats_inf_as_a_short_gap(F, vital_chunks):
    from liquid_stream.apps.vitals.monitor import VitalsMonitor

    mon = VitalsMonitor([F.hr])
    chunks = [c.copy() for c in vital_chunks]
    chunks[8][40:60, 1] = np.inf
    ests = [e for c in chunks for e in mon.push(c)] + mon.flush()
    assert [e.status["hr"] for e in ests] == ["warmup"] + ["ok"] * 7 + ["bridged"] * 2 + ["ok"] * 10
    assert mon.gap_counts()["hr"]["short_gaps"] == 1
    assert all(np.isfinite(e.values["hr"]) for e in ests)


@pytest.mark.parametrize(
    "chunk, types, needles",
    [
        case("VitalsMonitor.push / wrong width", np.zeros((5, 3)), ValueError, ["(T, 2)"]),
        case("VitalsMonitor.push / 1-D", np.zeros(5), ValueError, ["(T, 2)"]),
        case("VitalsMonitor.push / strings", np.array([["a", "b"]]), ValueError, ["string"]),
        case(
            "VitalsMonitor.push / dict without II",
            {"PLETH": np.zeros(5)},
            (ValueError, KeyError),
            ["II"],
        ),
    ],
)
def test_vitals_monitor_refuses_malformed_chunks(F, chunk, types, needles):
    from liquid_stream.apps.vitals.monitor import VitalsMonitor

    mon = VitalsMonitor([F.hr])
    expect_refusal(lambda: mon.push(copy.deepcopy(chunk)), types, needles)
    assert mon.samples_in == 0


def test_no_malicious_pickle_ever_ran(F):
    """Last: none of the cases above unpickled the payload."""
    assert not F.marker.exists()
