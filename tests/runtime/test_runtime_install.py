"""The runtime on its own: the apps and the shipped models with the base install only.

``make test-runtime`` (run by CI after ``make test``) installs ``pip install .`` — no extras,
so no torch, scipy or matplotlib — into a fresh venv and runs the modules marked ``runtime``
there (tests/conftest.py). In the development venv they run too, as part of the suite.
Nothing here imports torch or the training package: records and audio are written with
numpy and the standard library, the commands run as the installed console script.

- a 90-s PPG record at 72 bpm (a pulse with a dicrotic wave) → ``vitals`` reads 72 ± 3 bpm
  on every valid second, and a flat PLETH gives no valid second and a technical alarm;
- ``kws --input`` hears four keywords spoken by espeak-ng, alike in 10 and 100 ms calls;
- ``train`` in the base install says in one line which extra it needs.
"""

from __future__ import annotations

import csv
import importlib.util
import os
import shutil
import subprocess
import sys
import wave
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.runtime

RUNTIME_ONLY = os.environ.get("LIQUID_STREAM_RUNTIME_ONLY") == "1"
FS = 125


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """``liquid-stream ARGS`` through the console script of this interpreter's venv."""
    exe = Path(sys.executable).with_name("liquid-stream")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [str(exe), *args], cwd=cwd, capture_output=True, text=True, timeout=600, env=env
    )


def write_wfdb(folder: Path, name: str, signals: dict[str, np.ndarray], fs: int = FS) -> Path:
    """A single-file WFDB record in format 16 (gain 1000 adu/unit), written by hand."""
    names = list(signals)
    x = np.stack([signals[n] for n in names], 1)
    d = np.round(x * 1000).astype("<i2")
    d.tofile(folder / f"{name}.dat")
    lines = [f"{name} {len(names)} {fs} {len(d)}"]
    for i, n in enumerate(names):
        lines.append(f"{name}.dat 16 1000/mV 16 0 {int(d[0, i])} 0 0 {n}")
    (folder / f"{name}.hea").write_text("\n".join(lines) + "\n")
    return folder / name


def ppg(seconds: float, bpm: float, seed: int = 0) -> np.ndarray:
    """A finger-PPG-like pulse train: a systolic wave and a dicrotic wave at half its height
    0.3 s later, slow breathing wander, a little noise."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * FS)) / FS
    x = np.zeros_like(t)
    period = 60.0 / bpm
    for b in np.arange(0.2, seconds + 1, period):
        x += np.exp(-0.5 * ((t - b) / 0.08) ** 2) + 0.5 * np.exp(-0.5 * ((t - b - 0.3) / 0.1) ** 2)
    return x + 0.1 * np.sin(2 * np.pi * 0.25 * t) + 0.01 * rng.standard_normal(len(t))


def read_vitals_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.skipif(not RUNTIME_ONLY, reason="checks the base-install venv of make test-runtime")
def test_the_base_install_has_no_torch_scipy_matplotlib_or_wfdb():
    for module in ("torch", "scipy", "matplotlib", "wfdb", "pandas", "neurokit2"):
        assert importlib.util.find_spec(module) is None, f"{module} is installed"
    assert importlib.util.find_spec("liquid_stream.apps.vitals.monitor") is not None


@pytest.mark.slow
def test_vitals_reads_a_ppg_record_and_gives_no_number_for_a_flat_line(tmp_path):
    write_wfdb(tmp_path, "pulse", {"PLETH": ppg(90, 72.0)})
    write_wfdb(tmp_path, "flat", {"PLETH": np.zeros(90 * FS)})
    for name in ("pulse", "flat"):
        r = cli(
            "vitals",
            "--record",
            str(tmp_path / name),
            "--speed",
            "max",
            "--no-ui",
            "--out",
            str(tmp_path / "out"),
            cwd=tmp_path,
        )
        assert r.returncode == 0, r.stdout + r.stderr
    pulse = read_vitals_csv(tmp_path / "out" / "pulse_vitals.csv")
    valid = [float(row["hr"]) for row in pulse if row["hr_valid"] == "1"]
    assert len(valid) >= 40, f"only {len(valid)} valid seconds of 90"
    assert max(abs(v - 72.0) for v in valid) <= 3.0, valid
    flat = read_vitals_csv(tmp_path / "out" / "flat_vitals.csv")
    assert not [row for row in flat if row["hr_valid"] == "1"]
    assert all("no signal on PLETH" in row["technical"] for row in flat[2:])


@pytest.mark.tts
@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="needs Debian's espeak-ng")
def test_kws_hears_spoken_keywords_alike_in_10_and_100_ms_calls(tmp_path):
    """Four keywords spoken by espeak-ng (22.05 kHz, resampled by the app), a second of
    silence around each: the shipped spotter finds each, with the same lines (time, word,
    score) in 10 ms and 100 ms calls."""
    words = ["yes", "stop", "left", "no"]
    parts, sr = [], 0
    for w in words:
        subprocess.run(["espeak-ng", "-w", str(tmp_path / f"{w}.wav"), w], check=True)
        with wave.open(str(tmp_path / f"{w}.wav")) as f:
            sr = f.getframerate()
            parts.append(np.frombuffer(f.readframes(f.getnframes()), "<i2"))
    silence = np.zeros(sr, "<i2")
    x = np.concatenate([silence, *[np.concatenate([p, silence]) for p in parts]])
    with wave.open(str(tmp_path / "words.wav"), "wb") as f:
        f.setnchannels(1)
        f.setsampwidth(2)
        f.setframerate(sr)
        f.writeframes(x.tobytes())
    outs = []
    for ms in ("10", "100"):
        r = cli(
            "kws",
            "--input",
            str(tmp_path / "words.wav"),
            "--fast",
            "--no-ui",
            "--chunk-ms",
            ms,
            cwd=tmp_path,
        )
        assert r.returncode == 0, r.stdout + r.stderr
        outs.append([ln for ln in r.stdout.splitlines() if ln[:2].isdigit()])
    assert [ln.split()[1] for ln in outs[0]] == words, outs[0]
    assert outs[0] == outs[1]


@pytest.mark.skipif(not RUNTIME_ONLY, reason="checks the base-install venv of make test-runtime")
def test_a_training_command_names_the_extra_it_needs(tmp_path):
    r = cli("train", "bidmc", "--data", str(tmp_path), cwd=tmp_path)
    assert r.returncode != 0
    lines = [ln for ln in (r.stdout + r.stderr).splitlines() if ln.strip()]
    assert lines[-1].startswith("Error:") and "liquid-stream[train]" in lines[-1], lines
    assert "Traceback" not in r.stderr
