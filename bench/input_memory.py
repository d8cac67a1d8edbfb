"""Peak memory of the apps against the length of their input file: ``kws --input`` on a
long WAV and ``vitals --record`` on a long WFDB record (issue 60 E).

    python bench/input_memory.py                          # 2-h WAV, 24-h record (+ short ones)
    python bench/input_memory.py --wav-hours 0.5 --record-hours 4 --skip vitals

Writes, in a temporary folder (``--keep DIR`` keeps them there), a 16 kHz 16-bit mono WAV
of ``--wav-hours`` (quiet noise with a 440 Hz tone: no keyword) and a 125 Hz WFDB record of
``--record-hours`` with the channels the shipped vitals models read (PLETH, II; format 16,
written a block at a time, so this process never holds the whole record), each also
``--short-minutes`` long. Runs each command in a fresh subprocess:

    liquid-stream kws --input WAV --fast
    liquid-stream vitals --record RECORD --speed max --no-ui --out DIR

and takes that child's peak resident set (``os.wait4``'s ``ru_maxrss``). The inputs are
written by another child process, so this one stays small: a child's ``ru_maxrss``
counts the pages it shares with its parent between the fork and the exec. Prints a table
(input, its length and size, peak RSS, wall time), the slope in MB per hour of input
between the short and the long input (0 when memory does not grow with the input), the
goals (``kws``: <= 200 MB on 2 h; ``vitals``: <= 300 MB on 24 h), the command, date and
commit. Nothing is timed as a test; the wall times are for orientation only.
"""

from __future__ import annotations

import argparse
import datetime
import os
import shlex
import subprocess
import sys
import tempfile
import time
import wave
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "liquid_stream.cli"]
WAV_RATE = 16000
REC_RATE = 125
GOALS_MB = {"kws": (2.0, 200.0), "vitals": (24.0, 300.0)}  # (hours, MB)
BLOCK_S = 600  # seconds generated and written at a time


def write_wav(path: Path, hours: float, seed: int = 0) -> Path:
    """A ``hours`` long 16 kHz 16-bit mono WAV: noise at -40 dBFS and a quiet 440 Hz tone."""
    import numpy as np

    rng = np.random.default_rng(seed)
    n = int(round(hours * 3600 * WAV_RATE))
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(WAV_RATE)
        for a in range(0, n, BLOCK_S * WAV_RATE):
            t = np.arange(a, min(n, a + BLOCK_S * WAV_RATE)) / WAV_RATE
            x = 0.01 * rng.standard_normal(len(t)) + 0.02 * np.sin(2 * np.pi * 440 * t)
            w.writeframes(np.round(np.clip(x, -1, 1) * 32767).astype("<i2").tobytes())
    return path


def write_record(root: Path, name: str, hours: float, seed: int = 0) -> Path:
    """A ``hours`` long WFDB record ``root/name`` (PLETH, II at 125 Hz, format 16, gain
    10000/unit: a pulse at 60-100 bpm, an ECG-like spike train, a little noise)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    n = int(round(hours * 3600 * REC_RATE))
    root.mkdir(parents=True, exist_ok=True)
    phase0 = 0.0
    with open(root / f"{name}.dat", "wb") as f:
        for a in range(0, n, BLOCK_S * REC_RATE):
            m = min(n, a + BLOCK_S * REC_RATE) - a
            t = np.arange(a, a + m) / REC_RATE
            hr = 80 + 20 * np.sin(2 * np.pi * t / 3600)  # bpm, slowly drifting
            phase = phase0 + 2 * np.pi * np.cumsum(hr / 60) / REC_RATE
            phase0 = float(phase[-1])
            pleth = 0.5 + 0.2 * np.sin(phase) + 0.05 * np.sin(2 * phase)
            ecg = 0.1 + 0.8 * np.maximum(0, np.cos(phase)) ** 20
            x = np.stack([pleth, ecg], 1) + rng.normal(0, 0.01, (m, 2))
            f.write(np.round(x * 10000).astype("<i2").tobytes())
    lines = [f"{name} 2 {REC_RATE} {n}"] + [
        f"{name}.dat 16 10000(0)/{unit} 16 0 0 0 0 {sig}"
        for sig, unit in (("PLETH,", "NU"), ("II,", "mV"))
    ]
    (root / f"{name}.hea").write_text("\n".join(lines) + "\n")
    return root / name


def write_in_child(kind: str, path: Path, hours: float) -> None:
    """Write an input in a child process (module docstring: why)."""
    subprocess.run([sys.executable, __file__, "--write", kind, str(path), repr(hours)], check=True)


def peak_rss(cmd: list[str], log: Path) -> tuple[float, float, int]:
    """Run ``cmd`` in a fresh process (output to ``log``): (peak RSS MB, wall s, exit code)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "ORT_DISABLE_TELEMETRY": "1"}
    t = time.perf_counter()
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
        _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return usage.ru_maxrss / 1024, time.perf_counter() - t, proc.returncode


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--wav-hours", type=float, default=2.0)
    ap.add_argument("--record-hours", type=float, default=24.0)
    ap.add_argument("--short-minutes", type=float, default=10.0)
    ap.add_argument("--skip", choices=["kws", "vitals"], action="append", default=[])
    ap.add_argument("--keep", type=Path, default=None, help="Write the inputs here and keep them.")
    ap.add_argument("--write", nargs=3, help=argparse.SUPPRESS)  # internal: KIND PATH HOURS
    args = ap.parse_args()
    if args.write:
        kind, path, hours = args.write
        if kind == "wav":
            write_wav(Path(path), float(hours))
        else:
            write_record(Path(path).parent, Path(path).name, float(hours))
        return
    tmp = None
    if args.keep is None:
        tmp = tempfile.TemporaryDirectory(prefix="input_memory-")
        d = Path(tmp.name)
    else:
        d = args.keep
        d.mkdir(parents=True, exist_ok=True)
    short_h = args.short_minutes / 60
    rows = []
    try:
        if "kws" not in args.skip:
            for hours in (short_h, args.wav_hours):
                wav = d / f"audio_{hours:g}h.wav"
                write_in_child("wav", wav, hours)
                cmd = [*CLI, "kws", "--input", str(wav), "--fast"]
                rows.append(("kws", hours, wav.stat().st_size, *peak_rss(cmd, d / "kws.log")))
        if "vitals" not in args.skip:
            for hours in (short_h, args.record_hours):
                name = f"rec{hours:g}h".replace(".", "_")
                rec = d / "records" / name
                write_in_child("record", rec, hours)
                size = Path(f"{rec}.dat").stat().st_size
                cmd = [
                    *CLI,
                    "vitals",
                    "--record",
                    str(rec),
                    "--speed",
                    "max",
                    "--no-ui",
                    "--out",
                    str(d / "out" / name),
                ]
                rows.append(("vitals", hours, size, *peak_rss(cmd, d / "vitals.log")))
    finally:
        if tmp is not None:
            tmp.cleanup()
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    print("| command | input | hours | file MB | peak RSS MB | wall s | exit |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for app, hours, size, rss, wall, rc in rows:
        kind = "WAV 16 kHz int16" if app == "kws" else "WFDB 125 Hz PLETH+II"
        print(
            f"| {app} | {kind} | {hours:g} | {size / 2**20:.0f} | {rss:.0f} | {wall:.0f} | {rc} |"
        )
    for app in ("kws", "vitals"):
        r = [row for row in rows if row[0] == app]
        if len(r) == 2:
            (_, h0, _, m0, _, _), (_, h1, _, m1, _, _) = r
            hours, goal = GOALS_MB[app]
            ok = "met" if m1 <= goal and h1 >= hours else ("NOT met" if m1 > goal else "n/a")
            print(
                f"{app}: {(m1 - m0) / (h1 - h0):+.1f} MB per hour of input; goal <= {goal:g} "
                f"MB on {hours:g} h: {ok} ({m1:.0f} MB on {h1:g} h)"
            )
    print(f"command: python {shlex.join(['bench/input_memory.py', *sys.argv[1:]])}")
    print(f"date: {datetime.date.today()}  commit: {commit}  python {sys.version.split()[0]}")


if __name__ == "__main__":
    main()
