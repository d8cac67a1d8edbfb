"""Hostile records and model sizes (issue 60 A, B, E for vitals): bad WFDB headers and signal
files × the commands that read them, oversized rates and state sizes, a full disk under
``vitals --out``, and the record source's streaming read.

Every row feeds one bad input to one real entry point, as tests/test_hostile_inputs.py
does: the ``liquid-stream`` CLI through click's runner (a non-zero exit, no traceback, the
error on ONE line, the last, naming the problem and the file or key, and nothing written
in the folder the command runs in) or a Python API (its own error type, one line). The
records are real WFDB files (tests/fixtures_vitals.py), edited the way the probe edited
them; the models are real tiny exported ONNX graphs; ``evaluate`` reads a real checkpoint
of a one-step ``train bidmc`` run. Each row failed before the fix: the rate ``-125`` was
read as 250 Hz and streamed, ``nan`` was a TypeError, ``1e9`` was read as 1 Hz (and
hung), two ``II`` channels were accepted (the first won), 16-bit data declared format 212
or 80 streamed as garbage, an unnamed signal was an AttributeError, ``réc_ü`` was refused,
a model's ``sample_rate`` of 1e12 tried to allocate a terabyte filter, ``d_state=100000``
a 149 GiB matrix, and a full disk left a CSV without its summary.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from click.testing import CliRunner
from fixtures_vitals import export_vital_model, truncate_record, write_record
from hostile import assert_one_line_error, invoke, small_tmpfs

from liquid_stream.cli import main

# ============================================================================ fixtures


def _edit(src_dir: Path, dst_dir: Path, name: str, edit) -> Path:
    """A copy of the records of ``src_dir`` in ``dst_dir`` with ``name``'s header text
    replaced by ``edit(text)``; returns ``dst_dir / name``."""
    shutil.copytree(src_dir, dst_dir)
    hea = dst_dir / f"{name}.hea"
    hea.write_text(edit(hea.read_text()))
    return dst_dir / name


def _rate(value: str):
    """Replace the header's sampling rate (125) with ``value``."""

    def edit(text: str) -> str:
        first, rest = text.split("\n", 1)
        fields = first.split()
        assert fields[2] == "125", first
        fields[2] = value
        return " ".join(fields) + "\n" + rest

    return edit


def _rename(old: str, new: str):
    """Rename signal ``old`` (``"RESP,"``) to ``new`` (``""``: no name at all)."""

    def edit(text: str) -> str:
        lines = text.split("\n")
        hit = [i for i, ln in enumerate(lines) if ln.endswith(" " + old)]
        assert len(hit) == 1, text
        lines[hit[0]] = lines[hit[0]][: -len(old)].rstrip() + (" " + new if new else "")
        return "\n".join(lines)

    return edit


def _fmt(fmt: str):
    """Declare every signal in format ``fmt`` (the file stays 16-bit)."""
    return lambda text: text.replace(".dat 16 ", f".dat {fmt} ")


def _records(root: Path, seconds: float = 40) -> Path:
    """Three BIDMC-style records (what ``train bidmc`` needs for a record-wise split)."""
    for i in (1, 2, 3):
        write_record(root, f"bidmc0{i}", seconds=seconds, seed=i)
    return root


# (key, header edit of bidmc01): the bad records every command is tried on
BAD = {
    "neg_rate": _rate("-125"),
    "zero_rate": _rate("0"),
    "nan_rate": _rate("nan"),
    "giga_rate": _rate("1e9"),
    "slow_rate": _rate("5"),
    "dup_ii": _rename("RESP,", "II,"),
    "dup_pleth": _rename("II,", "pleth"),
    "no_name": _rename("RESP,", ""),
    "fmt212": _fmt("212"),
    "fmt80": _fmt("80"),
}


@pytest.fixture(scope="session")
def R(tmp_path_factory) -> SimpleNamespace:
    """Every record and model of the cases, made once: read-only for the cases."""
    d = tmp_path_factory.mktemp("records")
    r = SimpleNamespace(dir=d)
    r.hr = d / "hr.onnx"
    export_vital_model(r.hr, "hr")
    r.good_dir = _records(d / "good")
    r.good = r.good_dir / "bidmc01"
    for key, edit in BAD.items():
        setattr(r, key, _edit(r.good_dir, d / key, "bidmc01", edit))
    # 8-bit samples declared format 16: the file is exactly half what the header implies
    r.half = _edit(r.good_dir, d / "half", "bidmc01", lambda t: t)
    dat = r.half.with_suffix(".dat")
    dat.write_bytes(np.fromfile(dat, "<i2").astype(np.int8).tobytes())
    # a copy cut at a whole number of frames: truncated, not another format
    r.cut = _edit(r.good_dir, d / "cut", "bidmc01", lambda t: t)
    dat = r.cut.with_suffix(".dat")
    dat.write_bytes(dat.read_bytes()[: 6 * 125 * 25])  # 25 s of 40, 3 signals of 2 bytes
    # a non-ASCII record name (files, header and the numerics record renamed)
    r.uni = d / "uni" / "réc_ü"
    (d / "uni").mkdir()
    for src, dst in (("bidmc01", "réc_ü"), ("bidmc01n", "réc_ün")):
        shutil.copy(r.good_dir / f"{src}.dat", d / "uni" / f"{dst}.dat")
        text = (r.good_dir / f"{src}.hea").read_text(encoding="utf-8")
        (d / "uni" / f"{dst}.hea").write_text(text.replace(src, dst), encoding="utf-8")
    # a model exported with a sample_rate of 1e12 Hz in its metadata
    r.hr_tera = d / "hr_tera.onnx"
    export_vital_model(r.hr_tera, "hr", sample_rate=1e12)
    # a checkpoint of a one-step bidmc run on the good records, for `evaluate`
    res = CliRunner().invoke(
        main,
        [
            "train",
            "bidmc",
            "--data",
            str(r.good_dir),
            "--out",
            str(d / "run"),
            "--preset",
            "cpu",
            "--max-steps",
            "1",
            "--set",
            "train.device=cpu",
            "--set",
            "train.progress=false",
            *[
                a
                for s in (
                    "model.d_model=4",
                    "model.n_layers=1",
                    "model.d_state=4",
                    "data.window=250",
                    "data.hop=250",
                )
                for a in ("--set", s)
            ],
        ],
    )
    assert res.exit_code == 0, res.output
    r.ckpt = d / "run" / "best.pt"
    return r


def case(id_, *values):
    return pytest.param(*values, id=id_)


# ====================================================== CLI: bad records, three commands


def _vitals(key, model="hr"):
    return lambda r, w: [
        "vitals",
        getattr(r, model),
        "--record",
        getattr(r, key),
        "--speed",
        "max",
        "--no-ui",
        "--out",
        w / "vitals",
    ]


def _train(key):
    return lambda r, w: [
        "train",
        "bidmc",
        "--data",
        getattr(r, key).parent,
        "--out",
        w / "run",
        "--preset",
        "cpu",
        "--max-steps",
        "1",
        "--set",
        "train.device=cpu",
        "--set",
        "train.progress=false",
    ]


def _evaluate(key):
    return lambda r, w: [
        "evaluate",
        r.ckpt,
        "--data",
        getattr(r, key).parent,
        "--device",
        "cpu",
        "--out",
        w / "eval",
    ]


# (what the error must name, per bad record): the header and the problem
NEEDLES = {
    "neg_rate": ["neg_rate/bidmc01.hea", "sampling rate -125 Hz", "0.001 to 100000 Hz"],
    "zero_rate": ["zero_rate/bidmc01.hea", "sampling rate 0 Hz"],
    "nan_rate": ["nan_rate/bidmc01.hea", "sampling rate 'nan'", "not a finite number"],
    "giga_rate": ["giga_rate/bidmc01.hea", "sampling rate 1e9 Hz", "0.001 to 100000 Hz"],
    "dup_ii": ["dup_ii/bidmc01.hea", "channel 'II' is named twice"],
    "dup_pleth": ["dup_pleth/bidmc01.hea", "channel 'pleth' is named twice"],
    "no_name": ["no_name/bidmc01.hea", "signal 1 has no name"],
    "fmt212": ["fmt212/bidmc01.dat", "format 212 need", "does not match"],
    "fmt80": ["fmt80/bidmc01.dat", "format 80 need", "does not match"],
    "half": ["half/bidmc01.dat", "exactly what format", "format 16 need", "does not match"],
}
CLI_ERRORS = (
    [case(f"vitals / {k}", _vitals(k), v) for k, v in NEEDLES.items()]
    + [
        case(
            "vitals / 5 Hz record",
            _vitals("slow_rate"),
            ["slow_rate/bidmc01.hea", "5 Hz is below the 10 Hz"],
        )
    ]
    + [case(f"train bidmc / {k}", _train(k), v) for k, v in NEEDLES.items()]
    + [case(f"evaluate / {k}", _evaluate(k), v) for k, v in NEEDLES.items()]
    + [
        case(
            "vitals / model sample_rate 1e12",
            _vitals("good", "hr_tera"),
            ["hr_tera.onnx", "sample_rate 1e+12 Hz", "100000 Hz"],
        ),
        case(
            "train / d_state 100000 on a tiny model",
            lambda r, w: [
                "train",
                "toy",
                "--preset",
                "tiny",
                "--max-steps",
                "1",
                "--out",
                w / "run",
                "--set",
                "model.d_state=100000",
            ],
            ["model.d_state", "<= 4096", "MAX_D_STATE", "100000"],
        ),
    ]
)


@pytest.mark.parametrize("argv, needles", CLI_ERRORS)
def test_cli_refuses(R, work, argv, needles):
    r = invoke(argv(R, work))
    assert_one_line_error(r, needles)
    assert list(work.rglob("*")) == []  # nothing written, not even an empty --out folder


# ========================================================= CLI: records that must work


def _summary(work: Path, name: str) -> dict:
    return json.loads((work / "vitals" / f"{name}_summary.json").read_text(encoding="utf-8"))


def test_cli_vitals_reads_a_non_ascii_record_name(R, work):
    """``réc_ü`` (UTF-8 header and file names) streams like the same record as bidmc01."""
    r = invoke(_vitals("uni")(R, work))
    assert r.exit_code == 0, r.output
    s = _summary(work, "réc_ü")
    assert s["record"] == "réc_ü" and s["numerics"] == "réc_ün" and s["seconds"] == 40
    work2 = work / "again"
    r = invoke(["vitals", R.hr, "--record", R.good, "--speed", "max", "--no-ui", "--out", work2])
    assert r.exit_code == 0, r.output
    same = json.loads((work2 / "bidmc01_summary.json").read_text())
    assert json.dumps(s["metrics"]) == json.dumps(same["metrics"])


def test_cli_vitals_streams_a_record_cut_at_a_whole_frame(R, work):
    """Shorter than declared by whole frames and no other format's size: truncated, and
    streamed as far as it goes (the format check does not take it for a mismatch)."""
    r = invoke(_vitals("cut")(R, work))
    assert r.exit_code == 0, r.output
    assert "record bidmc01 is truncated" in r.output
    s = _summary(work, "bidmc01")
    assert s["truncated"] and s["seconds"] == 25


# ============================================================ API: the streaming read


def test_record_source_streams_block_by_block_the_same_numbers(R, monkeypatch, tmp_path):
    """Chunks read in blocks of 37 frames (so chunks straddle blocks) equal the rows of
    the whole record read at once, bit for bit, and the source never holds more than a
    block: memory does not grow with the record (fast format 16 and wfdb's format 24)."""
    import wfdb

    import liquid_stream.apps.vitals.record as vr
    from liquid_stream.io.wfdb import read_record

    x = np.random.default_rng(1).normal(size=(3000, 3))
    x[100:120, 1] = np.nan
    wfdb.wrsamp(
        "f24",
        fs=97.3,
        units=["mV"] * 3,
        sig_name=["RESP,", "PLETH,", "II,"],
        p_signal=x,
        fmt=["24"] * 3,
        write_dir=str(tmp_path),
    )
    monkeypatch.setattr(vr, "BLOCK_FRAMES", 37)
    for rec, cols in ((R.good_dir / "bidmc02", [2, 1]), (tmp_path / "f24", [2, 1])):
        src = vr.RecordSource(rec, ["II", "PLETH"])
        whole = read_record(rec, channels=cols).p_signal
        assert len(src._first) == 37
        got = list(src.chunks(None, seconds=0.77))
        assert all(len(c) in (int(0.77 * src.fs), int(0.77 * src.fs) + 1) for c in got[:-1])
        assert np.array_equal(np.concatenate(got), whole, equal_nan=True)
        assert src.duration_s == len(whole) / src.fs


def test_resampler_refuses_a_terabyte_filter():
    from liquid_stream.apps.common.resample import ResampleError, StreamResampler

    for fs_in, fs_out in ((8000, 1e12), (125, 1e12), (1e9, 125)):
        with pytest.raises(ResampleError, match="beyond the limit of 100000") as e:
            StreamResampler(fs_in, fs_out)
        assert "\n" not in str(e.value) and f"{fs_out:g} Hz" in str(e.value)
    assert StreamResampler(44100, 16000).up == 160  # real rates are far inside it


# ================================================================= disk full: vitals --out


@pytest.fixture
def small_disk(tmp_path):
    """A 32 KiB tmpfs: room for the CSV, not for the PNG. Root only (mount)."""
    with small_tmpfs(tmp_path / "full", "32k") as d:
        yield d


def test_cli_vitals_out_on_a_full_disk_publishes_nothing_half(R, work, small_disk):
    """The results do not fit: one error line after the printed summary, and none of the
    three files published (before: the CSV was left without its summary)."""
    out = small_disk / "vitals"
    r = invoke(["vitals", R.hr, "--record", R.good, "--speed", "max", "--no-ui", "--out", out])
    line = assert_one_line_error(r, [str(out), "No space left on device", "nothing written"])
    assert "results (40 s" in r.output, r.output  # the summary is printed before it
    assert sorted(p.name for p in out.iterdir()) == [], line
    assert sorted(p.name for p in work.iterdir()) == []


# ======================================================================= truncation rule


def test_truncated_fixture_is_still_truncation(R, tmp_path):
    """tests/test_hostile_inputs.py's truncation (half the bytes plus one) stays a
    truncated record, not a format mismatch."""
    from liquid_stream.io.wfdb import complete_samples, read_header

    p = write_record(tmp_path, "trunc", seconds=20)
    truncate_record(p, 0.5)
    assert complete_samples(p, read_header(p)) == 1250
