"""NaN-gap handling of the vital-sign monitor (``liquid-stream vitals``), second by second.

Real WFDB records (a simulated BIDMC record copied with PLETH / II / RESP set to NaN and
written with ``wfdb.wrsamp`` in format 16), real (tiny, untrained) exported ONNX models, the
real app code paths (``open_record`` + ``run_record``, ``VitalsMonitor.push``, the CLI).

The expected statuses come from the rule the monitor documents, applied here to the whole
record at once (:func:`rule`), independently of the streaming implementation:

- a *gap* is a maximal run of samples where any of the model's channels is NaN;
- it is *short* (interpolated, "bridged") when it has a sample before it (not at the stream
  start), a sample after it (not open at the end) and at most ``max_gap`` samples
  (2 s = 250 samples by default); otherwise it is *long*: its samples are skipped and the
  model is reset;
- the estimate of second k is the model output at sample i = k*fs - 1:
  ``gap`` if i is in a long gap; else ``warmup`` if fewer than W samples were fed since the
  last reset (``i - first + 1 < W``, first = the first sample after the last long gap
  before i, or 0); else ``bridged`` if the window (i-W, i] holds an interpolated sample;
  else ``ok``.

For the 32-s window the sequences are also written out by hand (:data:`HAND_32S`).
"""

from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/: the fixtures
from fixtures_vitals import export_vital_model  # noqa: E402

from liquid_stream.apps.vitals.monitor import VitalsMonitor  # noqa: E402
from liquid_stream.apps.vitals.record import RecordSource  # noqa: E402
from liquid_stream.apps.vitals.run import open_record, run_record  # noqa: E402
from liquid_stream.cli import main  # noqa: E402

FS = 125
SECONDS = 120  # the simulated record: 2 min, 15001 samples -> seconds 1..120
MAX_GAP = 2 * FS  # the default --max-gap (2 s), in samples
SIG = ("RESP,", "PLETH,", "V,", "AVR,", "II,")  # the simulated record's channels


def s(t: float) -> int:
    """Seconds -> sample index."""
    return int(round(t * FS))


# NaN spans [a, b) in samples (PLETH unless the channel is given)
PATTERNS = {
    # (a) 3-s gaps starting on 1-s chunk boundaries
    "a_boundary": [(s(40), s(43)), (s(70), s(73))],
    # (b) 3-s gaps every 6 s, from the stream start
    "b_every6": [(s(6 * j), s(6 * j + 3)) for j in range(SECONDS // 6)],
    # (c) a 0.5-s gap (62 samples) 15 s after a 5-s gap, both on chunk boundaries
    "c_short_after_long": [(s(40), s(45)), (s(60), s(60) + FS // 2)],
    # (d) as (a), off the chunk boundaries
    "d_off_boundary": [(s(40.3), s(40.3) + 3 * FS), (s(70.3), s(70.3) + 3 * FS)],
}


def runs(*pairs) -> list[str]:
    out = []
    for status, n in pairs:
        out += [status] * n
    return out


# the 32-s window (4000 samples, as the BIDMC models), derived by hand from the rule
HAND_32S = {
    # fed from 0 s: ok from 32 s; gap seconds 41-43; fed again from 43 s (ok would be at
    # 75 s), but the second gap (seconds 71-73) resets again: fed from 73 s, ok from 105 s
    "a_boundary": runs(
        ("warmup", 31),
        ("ok", 9),
        ("gap", 3),
        ("warmup", 27),
        ("gap", 3),
        ("warmup", 31),
        ("ok", 16),
    ),
    # every good stretch is 3 s < 32 s: never ok
    "b_every6": runs(("gap", 3), ("warmup", 3)) * (SECONDS // 6),
    # 5-s gap: seconds 41-45, fed from 45 s, ok at 77 s; the 0.5-s gap (60.0-60.496 s) is
    # interpolated, so 77..92 (window (k-32, k] holds sample 7561) are bridged, then ok
    "c_short_after_long": runs(
        ("warmup", 31), ("ok", 9), ("gap", 5), ("warmup", 31), ("bridged", 16), ("ok", 28)
    ),
    # gaps at samples 5038-5412 and 8788-9162 (40.304-43.3 s, 70.304-73.3 s): gap seconds
    # 41-43 and 71-73 (sample 125k - 1 NaN); fed from 9163: ok once 125k - 9163 >= 4000
    "d_off_boundary": runs(
        ("warmup", 31),
        ("ok", 9),
        ("gap", 3),
        ("warmup", 27),
        ("gap", 3),
        ("warmup", 32),
        ("ok", 15),
    ),
}
HAND_COUNTS = {  # (short gaps, short s, long gaps, long s)
    "a_boundary": (0, 0.0, 2, 6.0),
    "b_every6": (0, 0.0, 20, 60.0),
    "c_short_after_long": (1, 62 / FS, 1, 5.0),
    "d_off_boundary": (0, 0.0, 2, 6.0),
}


def rule(bad: np.ndarray, window: int, max_gap: int = MAX_GAP, fs: int = FS):
    """(statuses of seconds 1..len//fs, gap counts) by the documented rule (module doc)."""
    n = len(bad)
    gaps, i = [], 0
    while i < n:
        if bad[i]:
            j = i
            while j < n and bad[j]:
                j += 1
            gaps.append((i, j))
            i = j
        else:
            i += 1
    skipped = np.zeros(n, bool)
    interpolated = np.zeros(n, bool)
    first = np.zeros(n, np.int64)  # per sample: first sample fed since the last reset
    counts = {"short_gaps": 0, "short_gap_s": 0.0, "long_gaps": 0, "long_gap_s": 0.0}
    for a, b in gaps:
        if a > 0 and b < n and b - a <= max_gap:
            interpolated[a:b] = True
            counts["short_gaps"] += 1
            counts["short_gap_s"] += (b - a) / fs
        else:
            skipped[a:b] = True
            first[b:] = b
            counts["long_gaps"] += 1
            counts["long_gap_s"] += (b - a) / fs
    status = []
    for k in range(1, n // fs + 1):
        i = k * fs - 1
        if skipped[i]:
            status.append("gap")
        elif i - first[i] + 1 < window:
            status.append("warmup")
        elif interpolated[max(0, i - window + 1) : i + 1].any():
            status.append("bridged")
        else:
            status.append("ok")
    return status, counts


# ---------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """Tiny exported models: hr with a 32-s window (as BIDMC's) and a 2-s one, rr 4 s."""
    d = tmp_path_factory.mktemp("gap_models")
    out = {}
    for name, target, window in (
        ("hr32", "hr", 32 * FS),
        ("hr2", "hr", 2 * FS),
        ("rr4", "rr", 4 * FS),
    ):
        (d / name).mkdir()
        export_vital_model(d / name / f"{target}.onnx", target, window=window, seed=1)
        out[name] = d / name / f"{target}.onnx"
    return out


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    """One simulated BIDMC record pair, 2 min (training/data/bidmc_sim)."""
    import wfdb

    from liquid_stream.training.data.vitals.bidmc_sim import write_bidmc_sim

    root = tmp_path_factory.mktemp("gap_sim") / "sim"
    write_bidmc_sim(root, records=1, minutes=SECONDS / 60, seed=7, progress=False)
    sig = wfdb.rdrecord(str(root / "bidmc01"))
    num = wfdb.rdrecord(str(root / "bidmc01n"), physical=False)
    assert list(sig.sig_name) == list(SIG) and sig.p_signal.shape == (SECONDS * FS + 1, 5)
    assert np.isfinite(sig.p_signal).all()
    return sig, num


def write_gap_record(sim, root: Path, name: str, spans) -> tuple[Path, dict[str, np.ndarray]]:
    """Copy the simulated record as ``root/name`` (+ numerics) with NaN at ``spans``
    (``(a, b)`` PLETH or ``(channel, a, b)``, samples); returns (path, NaN mask per channel)."""
    import wfdb

    sig, num = sim
    x = sig.p_signal.copy()
    for span in spans:
        ch, a, b = span if len(span) == 3 else ("PLETH", *span)
        x[a:b, SIG.index(f"{ch},")] = np.nan
    root.mkdir(parents=True, exist_ok=True)
    wfdb.wrsamp(
        name,
        fs=FS,
        units=list(sig.units),
        sig_name=list(SIG),
        p_signal=x,
        fmt=["16"] * len(SIG),
        write_dir=str(root),
    )
    wfdb.wrsamp(
        f"{name}n",
        fs=1,
        units=list(num.units),
        sig_name=list(num.sig_name),
        d_signal=num.d_signal,
        fmt=["16"] * len(num.sig_name),
        adc_gain=num.adc_gain,
        baseline=num.baseline,
        write_dir=str(root),
    )
    path = root / name
    # the NaNs come back from the format-16 file exactly where they were put
    back = RecordSource(path).signal
    np.testing.assert_array_equal(np.isnan(back), np.isnan(x))
    return path, {c.rstrip(","): np.isnan(x[:, i]) for i, c in enumerate(SIG)}


def bad_for(mask: dict[str, np.ndarray], model: Path) -> np.ndarray:
    """A model's bad samples: any of its channels NaN (hr: PLETH, II; rr: RESP, PLETH)."""
    chans = {"hr": ("PLETH", "II"), "rr": ("RESP", "PLETH")}[model.stem]
    return np.logical_or.reduce([mask[c] for c in chans])


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def gap_tuple(g: dict) -> tuple:
    return (g["short_gaps"], g["short_gap_s"], g["long_gaps"], g["long_gap_s"])


# ------------------------------------------------------------------------------ tests


def test_rule_reproduces_the_hand_derived_sequences():
    """The test's own rule agrees with the sequences written out by hand (32-s window)."""
    n = SECONDS * FS + 1
    for name, spans in PATTERNS.items():
        bad = np.zeros(n, bool)
        for a, b in spans:
            bad[a:b] = True
        status, counts = rule(bad, 32 * FS)
        assert status == HAND_32S[name], name
        assert gap_tuple(counts) == pytest.approx(HAND_COUNTS[name]), name


@pytest.mark.slow
@pytest.mark.parametrize("window", ["hr32", "hr2"])
@pytest.mark.parametrize("pattern", list(PATTERNS))
def test_gap_patterns_monitor_api(models, sim, tmp_path, pattern, window):
    """open_record + run_record (1-s chunks, as the app streams): every second's status,
    value and the gap counts follow the rule; long gaps are counted once each."""
    model = models[window]
    path, mask = write_gap_record(sim, tmp_path, "bidmc01", PATTERNS[pattern])
    want, want_counts = rule(bad_for(mask, model), 32 * FS if window == "hr32" else 2 * FS)
    if window == "hr32":
        assert want == HAND_32S[pattern]
    monitor, source = open_record([model], path)
    result = run_record(monitor, source, speed=None)
    assert [e.time_s for e in result.estimates] == list(range(1, SECONDS + 1))
    got = [e.status["hr"] for e in result.estimates]
    assert got == want, _first_diff(got, want)
    values = np.array([e.values["hr"] for e in result.estimates])
    assert (np.isnan(values) == (np.array(got) == "gap")).all()
    assert gap_tuple(result.gaps["hr"]) == pytest.approx(gap_tuple(want_counts))
    assert result.metrics()["hr"]["valid"] == want.count("ok")


def test_model_reset_at_each_long_gap(models, sim, tmp_path):
    """(a): after the second long gap (ending at 73 s) the model starts from zero state:
    its estimates equal those of a fresh monitor fed the record from 73 s on."""
    path, _ = write_gap_record(sim, tmp_path, "bidmc01", PATTERNS["a_boundary"])
    for name in ("hr32", "hr2"):
        monitor, source = open_record([models[name]], path)
        ests = run_record(monitor, source, speed=None).estimates
        fresh = VitalsMonitor([models[name]], channels=source.channels)
        tail = fresh.push(source.signal[s(73) :]) + fresh.flush()
        np.testing.assert_allclose(
            [e.values["hr"] for e in ests[73:]],
            [e.values["hr"] for e in tail],
            rtol=1e-5,
            atol=1e-5,
        )


@pytest.mark.slow
@pytest.mark.parametrize("pattern", list(PATTERNS))
def test_gap_patterns_cli_csv(models, sim, tmp_path, pattern):
    """``liquid-stream vitals hr.onnx --record ... --speed max --no-ui``: the CSV's status
    and valid columns, the gap seconds' NaNs and the summary's gap counts (32-s window)."""
    path, _ = write_gap_record(sim, tmp_path / "rec", "bidmc01", PATTERNS[pattern])
    out = tmp_path / "out"
    res = CliRunner().invoke(
        main,
        [
            "vitals",
            str(models["hr32"]),
            "--record",
            str(path),
            "--speed",
            "max",
            "--no-ui",
            "--out",
            str(out),
        ],
    )
    assert res.exit_code == 0 and "Traceback" not in res.output, res.output
    rows = read_csv(out / "bidmc01_vitals.csv")
    want = HAND_32S[pattern]
    assert [int(r["time_s"]) for r in rows] == list(range(1, SECONDS + 1))
    got = [r["hr_status"] for r in rows]
    assert got == want, _first_diff(got, want)
    assert [int(r["hr_valid"]) for r in rows] == [int(w == "ok") for w in want]
    assert [math.isnan(float(r["hr"])) for r in rows] == [w == "gap" for w in want]
    gaps = json.loads((out / "bidmc01_summary.json").read_text())["gaps"]["hr"]
    assert gap_tuple(gaps) == pytest.approx(HAND_COUNTS[pattern])
    short, _, long, long_s = HAND_COUNTS[pattern]
    assert f"{short} short" in res.output and f"{long} long, model reset ({long_s:.1f} s)" in (
        res.output
    )


@pytest.mark.slow
def test_gap_pattern_cli_subprocess(models, sim, tmp_path):
    """(a) through the installed ``liquid-stream`` command in a subprocess."""
    path, _ = write_gap_record(sim, tmp_path / "rec", "bidmc01", PATTERNS["a_boundary"])
    exe = Path(sys.executable).parent / "liquid-stream"
    cmd = [str(exe)] if exe.is_file() else [sys.executable, "-m", "liquid_stream.cli"]
    out = tmp_path / "out"
    proc = subprocess.run(
        [
            *cmd,
            "vitals",
            str(models["hr32"]),
            "--record",
            str(path),
            "--speed",
            "max",
            "--no-ui",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "NO_COLOR": "1"},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = read_csv(out / "bidmc01_vitals.csv")
    status = {int(r["time_s"]): r["hr_status"] for r in rows}
    # the transitions of the repro: warm-up lasts a full window after each long gap
    assert [status[k] for k in (40, 41, 43, 44, 70, 71, 73, 74, 75, 104, 105)] == [
        "ok",
        "gap",
        "gap",
        "warmup",
        "warmup",
        "gap",
        "gap",
        "warmup",
        "warmup",
        "warmup",
        "ok",
    ]
    assert [r["hr_status"] for r in rows] == HAND_32S["a_boundary"]
    gaps = json.loads((out / "bidmc01_summary.json").read_text())["gaps"]["hr"]
    assert (gaps["long_gaps"], gaps["long_gap_s"], gaps["short_gaps"]) == (2, 6.0, 0)


# a record with every kind of gap, on and off chunk boundaries (samples; PLETH: both models)
MIXED = [
    (0, 100),  # at the stream start: long (nothing before it)
    (s(10), s(10) + MAX_GAP),  # exactly max_gap: short
    (s(15), s(15) + MAX_GAP + 1),  # one more: long
    ("II", s(20.5), s(20.5) + 60),  # hr only: short
    ("RESP", s(25), s(29)),  # rr only: long
    (s(40), s(43)),  # long, on a 1-s boundary
    (s(50), s(50.5)),  # short, on a boundary, after it
    (s(60.3), s(63.3)),  # long, off the boundaries
    (s(70), s(71)),  # short, exactly 1 s on the boundaries
    (s(80), s(85)),  # long ...
    (s(85.2), s(85.5)),  # ... and short 0.2 s after it
    (11250, 11300),  # two short gaps one good sample apart
    (11301, 11350),
    ("II", s(100), s(101.5)),  # II then PLETH: one hr gap of 2.5 s (long), rr 1 s (short)
    (s(101.5), s(102.5)),
    (s(118.5), SECONDS * FS + 1),  # open at the end of the stream: long
]


def _chunkings(n: int):
    yield "1 sample", [1] * n
    yield "7", [7] * (n // 7 + 1)
    yield "125", [125] * (n // 125 + 1)
    yield "1000", [1000] * (n // 1000 + 1)
    yield "whole", [n]
    for seed in range(3):
        rng = np.random.default_rng(seed)
        yield f"random {seed}", rng.integers(1, 400, n).tolist()


def _first_diff(got, want) -> str:
    for k, (g, w) in enumerate(zip(got, want, strict=False)):
        if g != w:
            return f"first difference at second {k + 1}: got {g!r}, want {w!r}"
    return f"lengths {len(got)} != {len(want)}"


@pytest.mark.slow
def test_chunking_does_not_change_anything(models, sim, tmp_path):
    """The same record pushed in chunks of 1 sample, 7, 125 (and the app's 1-s chunks),
    1000, all at once and random sizes: identical statuses, estimates and gap counts, and
    the statuses and counts are the rule's, for two models (different channels, windows)."""
    path, mask = write_gap_record(sim, tmp_path, "bidmc01", MIXED)
    paths = [models["hr2"], models["rr4"]]
    monitor, source = open_record(paths, path)
    ref = run_record(monitor, source, speed=None)  # the app's 1-s chunks
    targets = {"hr": paths[0], "rr": paths[1]}
    windows = {"hr": 2 * FS, "rr": 4 * FS}
    for t, model in targets.items():
        want, counts = rule(bad_for(mask, model), windows[t])
        got = [e.status[t] for e in ref.estimates]
        assert got == want, (t, _first_diff(got, want))
        assert gap_tuple(ref.gaps[t]) == pytest.approx(gap_tuple(counts)), t
    assert {e.status["hr"] for e in ref.estimates} == {"ok", "warmup", "bridged", "gap"}
    # counted by hand from MIXED: 7 short and 7 long gaps for each model
    for t in targets:
        assert (ref.gaps[t]["short_gaps"], ref.gaps[t]["long_gaps"]) == (7, 7), t

    x = source.signal
    for name, sizes in _chunkings(len(x)):
        m = VitalsMonitor(paths, channels=source.channels)
        ests, a = [], 0
        for size in sizes:
            if a >= len(x):
                break
            ests += m.push(x[a : a + size])
            a += size
        ests += m.flush()
        assert [e.time_s for e in ests] == list(range(1, SECONDS + 1)), name
        for t in targets:
            got = [e.status[t] for e in ests]
            want = [e.status[t] for e in ref.estimates]
            assert got == want, (name, t, _first_diff(got, want))
            np.testing.assert_allclose(
                [e.values[t] for e in ests],
                [e.values[t] for e in ref.estimates],
                rtol=1e-5,
                atol=1e-5,
                equal_nan=True,
                err_msg=f"{name} {t}",
            )
        assert m.gap_counts() == ref.gaps, name
