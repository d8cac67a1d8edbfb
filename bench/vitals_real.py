"""The shipped vital-sign models and classical peers on real recordings (issue 64 item 5).

    liquid-stream data real-samples runs/real           # the records (downloaded, once)
    python bench/vitals_real.py runs/real [--out runs/real-bench] [--records a,b]
        [--only dev|final|all] [--no-peers]

For every record of a real-samples folder (its ``manifest.json``; built by
training/data/vitals/real_samples.py, whose docstring gives the sources and the reference method):

- **the shipped models** ``liquid_stream.models.vitals_for(channels)`` picks, streamed
  through the app's own path (``open_record`` + ``run_record``: 1-s chunks, unpaced; the
  monitor resamples the record's rate to the models' 125 Hz). A record with II but no
  PLETH also gets the PPG+ECG models with a flat PLETH channel added (labelled "flat
  PLETH"); the monitor judges a flat line "no signal", so that row also scores the values
  it marks ``nosignal`` / ``recovering`` (never warm-up; said in the row). No model fits
  and no II: "no shipped model". The app turns a PPG upright itself (apps/vitals/ppg_polarity.py):
  the note gives the sign its rule picks for the recorded PLETH.
- **polarity**: the same record with PLETH inverted (x -> -x), streamed the same way; the
  row gives its own errors and the median (and 95th percentile) of
  |estimate(x) - estimate(-x)| over the seconds both are valid.
- **classical peers** on the same seconds as the model row: NeuroKit2 (``ecg_peaks``,
  ``ppg_findpeaks``, ``rsp_peaks``, the PPG-derived respiration of
  training/data/vitals/bidmc_baseline.py, and ECG-derived respiration ``ecg_rsp``), HeartPy and
  biosppy when installed (a note otherwise). How (the project's ``evaluate --baseline``
  definition): events detected once on the whole record (non-causal: the peers see the
  future, an advantage), rate at second k = 60 / median interval of the events in the
  model's trailing window [k - 32 s, k) (>= 3 events for HR, >= 2 for RR, 25-250 bpm /
  3-60 breaths/min, NaN otherwise); the PPG-derived RR from the window's own samples. A
  peer marked † uses the reference's own detector (NeuroKit2 neurokit / elgendi /
  khodadad, detector A of the reference) on the reference's channel: it is scored against
  itself and looks better than it is.
- **constant guess** for RR: 21.5 breaths/min, fixed in advance: the mean of the base RR
  draw U(8, 35) of the training simulator (training/data/vitals/vitals_sim.py ``RR_BASE``; docs/
  benchmarks.md defines no constant guess).

Scored seconds: the model's status ``ok`` or ``bridged`` (as bench/vitals_stream.py), and a
reference: the mean of the record's 1 Hz readings over the model's window (the app's window
reference), kept where at least half of those readings exist (the builder leaves uncertain
seconds NaN). Metrics: n seconds, RMSE, MAE, bias (estimate - reference), share within
±5 bpm (HR) / ±2 breaths/min (RR). Records under ``final/`` are held-out FINAL checks: their
rows come in a separate table; never tune on them.

Writes ``--out``/NAME.json (per-second series and metrics) and NAME.png (estimates vs
reference vs peers) for every record, and results.json, results.md (the printed tables).
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

from liquid_stream.apps.vitals.run import open_record, run_record
from liquid_stream.io.bidmc_vocab import WITHIN, channel_key, strip_name
from liquid_stream.io.wfdb import read_header, read_record, signals_by_name
from liquid_stream.models import ShippedModelMissing, shipped, vitals_for
from liquid_stream.training.data.vitals.real_samples import RealSamplesError, read_manifest

RR_CONSTANT = 21.5  # mean of U(8, 35), the training simulator's base RR draw (docstring)
VALID = ("ok", "bridged")
# a flat PLETH is "no signal" to the monitor: that row takes those values too (not warmup)
FLAT_VALID = (*VALID, "nosignal", "recovering")
HR_RANGE = (25.0, 250.0)
RR_RANGE = (3.0, 60.0)


# ---------------------------------------------------------------------------- metrics


def metrics(est, ref, tol: float) -> dict:
    """n, RMSE, MAE, bias (est - ref) and % within ``tol`` over the pairs where both are
    finite (NaN for n = 0)."""
    est, ref = np.asarray(est, np.float64), np.asarray(ref, np.float64)
    ok = np.isfinite(est) & np.isfinite(ref)
    d = est[ok] - ref[ok]
    nan = math.nan
    return {
        "n": int(ok.sum()),
        "rmse": float(np.sqrt(np.mean(d**2))) if len(d) else nan,
        "mae": float(np.mean(np.abs(d))) if len(d) else nan,
        "bias": float(np.mean(d)) if len(d) else nan,
        "within": float(100 * np.mean(np.abs(d) <= tol)) if len(d) else nan,
    }


def window_reference(
    readings: np.ndarray, times: np.ndarray, window: float, min_share: float = 0.5
) -> np.ndarray:
    """The app's window reference of the estimate at each time k (the mean of the finite
    1 Hz readings of seconds floor(k - window) .. k - 1), NaN where fewer than
    ``min_share`` of those seconds have a reading."""
    out = np.full(len(times), np.nan)
    for i, k in enumerate(np.asarray(times, np.int64)):
        k0 = max(0, int(math.floor(k - window + 1e-9)))
        seg = readings[k0 : min(int(k), len(readings))]
        fin = seg[np.isfinite(seg)]
        if len(seg) and len(fin) >= min_share * window:
            out[i] = fin.mean()
    return out


def trailing_rate(
    events: np.ndarray | None,
    times: np.ndarray,
    fs: float,
    window: float,
    min_events: int,
    lo_hi: tuple[float, float],
) -> np.ndarray:
    """60 / median interval of the events (sample indices) in [k - window, k) for each time
    k (s); NaN with fewer than ``min_events`` or outside ``lo_hi``."""
    out = np.full(len(times), np.nan)
    if events is None or len(events) < min_events:
        return out
    ev = np.sort(np.asarray(events, np.float64)) / fs
    for i, k in enumerate(times):
        p = ev[(ev >= k - window) & (ev < k)]
        if len(p) >= min_events:
            r = 60.0 / float(np.median(np.diff(p)))
            out[i] = r if lo_hi[0] <= r <= lo_hi[1] else np.nan
    return out


# ---------------------------------------------------------------------------- streaming


def stream(models: list[Path], record: str) -> dict:
    """Run the monitor over ``record``: {target: {"time", "value", "status"}}, windows."""
    monitor, source = open_record(models, record)
    res = run_record(monitor, source, speed=None)
    if res.error:
        print(f"  note: the monitor stopped early on {record}: {res.error}", flush=True)
    out = {}
    for t in res.targets:
        out[t] = {
            "time": np.array([e.time_s for e in res.estimates], np.float64),
            "value": np.array([e.values.get(t, math.nan) for e in res.estimates], np.float64),
            "status": [e.status.get(t, "") for e in res.estimates],
            "window": float(monitor.windows_s[t]),
            "model": next(Path(m).stem for m in models if _target_of(m, monitor) == t),
        }
    return out


def _target_of(model, monitor) -> str | None:
    for m in monitor.models:
        if Path(m.path).stem == Path(model).stem:
            return m.target
    return None


def variant(record: str, tmp: Path, kind: str) -> str:
    """``record`` rewritten into ``tmp`` with PLETH inverted (``"inverted"``) or a flat PLETH
    channel added (``"flat"``); the numerics copied as they are."""
    import shutil

    import wfdb

    src = Path(record)
    r = wfdb.rdrecord(str(src))
    x, names, units = np.asarray(r.p_signal, np.float64), list(r.sig_name), list(r.units)
    keys = [channel_key(n) for n in names]
    if kind == "inverted":
        x = x.copy()
        x[:, keys.index("pleth")] *= -1.0
    else:
        x = np.concatenate([np.zeros((len(x), 1)), x], axis=1)
        names, units = ["PLETH,", *names], ["NU", *units]
    out = tmp / kind
    out.mkdir(parents=True, exist_ok=True)
    wfdb.wrsamp(
        src.name,
        fs=r.fs,
        units=units,
        sig_name=names,
        p_signal=x,
        fmt=["16"] * len(names),
        write_dir=str(out),
    )
    for suffix in ("n.hea", "n.dat"):
        shutil.copy(src.parent / f"{src.name}{suffix}", out / f"{src.name}{suffix}")
    return str(out / src.name)


# ---------------------------------------------------------------------------- peers


def _quiet(fn):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return fn()
        except Exception as e:  # noqa: BLE001 - a peer that fails gives no estimate
            return e


def peer_events(sig: dict[str, np.ndarray], fs: float) -> tuple[dict, list[str]]:
    """{(target, name): event sample indices} of every peer the record's channels allow;
    notes on peers left out."""
    import neurokit2 as nk

    from liquid_stream.training.data.vitals.bidmc_baseline import ecg_peaks, ppg_peaks

    ev, notes = {}, []
    ecg, ppg, rsp = sig.get("II"), sig.get("PLETH"), sig.get("RESP")
    if ecg is not None:
        ev["hr", "NeuroKit2 ECG (neurokit) †"] = ecg_peaks(ecg, fs)

        def edr():
            pk = ecg_peaks(ecg, fs)
            rate = nk.ecg_rate(pk, sampling_rate=fs, desired_length=len(ecg))
            e = nk.ecg_rsp(rate, sampling_rate=fs)
            return rsp_troughs(e, fs)

        ev["rr", "NeuroKit2 ECG-derived (ecg_rsp)"] = _arr(_quiet(edr))
    if ppg is not None:
        ev["hr", "NeuroKit2 PPG (elgendi)" + (" †" if ecg is None else "")] = ppg_peaks(ppg, fs)
    if rsp is not None:
        # the reference counts troughs (breath onsets): the peer does too
        ev["rr", "NeuroKit2 RESP (khodadad) †"] = rsp_troughs(rsp, fs)
    try:
        import heartpy as hp
    except ImportError:
        notes.append("HeartPy not installed: left out (pip install heartpy)")
    else:

        def hp_peaks(x, pre):
            w, _ = hp.process(pre(np.asarray(x, np.float64)), float(fs))
            keep = np.asarray(w["binary_peaklist"], bool)
            return np.asarray(w["peaklist"], np.int64)[keep]

        if ppg is not None:
            ev["hr", "HeartPy PPG"] = _arr(
                _quiet(
                    lambda: hp_peaks(
                        ppg, lambda x: hp.filter_signal(x, [0.7, 3.5], fs, 3, "bandpass")
                    )
                )
            )
        if ecg is not None:
            ev["hr", "HeartPy ECG"] = _arr(
                _quiet(lambda: hp_peaks(ecg, lambda x: hp.remove_baseline_wander(x, fs)))
            )
        notes.append("HeartPy: no RR per window (its breathing rate is per whole segment)")
    try:
        from biosppy.signals import ecg as becg
        from biosppy.signals import ppg as bppg
        from biosppy.signals import resp as bresp
    except ImportError as e:
        notes.append(f"biosppy not usable ({e}): left out (pip install biosppy peakutils)")
    else:
        if ecg is not None:
            ev["hr", "biosppy ECG (hamilton)"] = _arr(
                _quiet(lambda: becg.ecg(signal=ecg, sampling_rate=fs, show=False)["rpeaks"])
            )
        if ppg is not None:
            ev["hr", "biosppy PPG"] = _arr(
                _quiet(lambda: bppg.ppg(signal=ppg, sampling_rate=fs, show=False)["peaks"])
            )
        if rsp is not None:  # every other zero crossing: one per breath
            ev["rr", "biosppy RESP"] = _arr(
                _quiet(lambda: bresp.resp(signal=rsp, sampling_rate=fs, show=False)["zeros"][::2])
            )
    return ev, notes


def rsp_troughs(x: np.ndarray, fs: float) -> np.ndarray:
    import neurokit2 as nk

    def find():
        _, info = nk.rsp_peaks(
            nk.rsp_clean(np.asarray(x, np.float64), sampling_rate=fs), sampling_rate=fs
        )
        return np.asarray(info["RSP_Troughs"], np.int64)

    return _arr(_quiet(find))


def _arr(v) -> np.ndarray | None:
    return None if isinstance(v, Exception) else np.asarray(v, np.int64)


def ppg_rr(pleth: np.ndarray, fs: float, times: np.ndarray, window: float) -> np.ndarray:
    """NeuroKit2 PPG-derived RR (training/data/vitals/bidmc_baseline.py ``ppg_resp_rate``) of the
    trailing window of each time."""
    from liquid_stream.training.data.vitals.bidmc_baseline import ppg_resp_rate

    out = np.full(len(times), np.nan)
    n = int(round(window * fs))
    for i, k in enumerate(times):
        b = int(round(k * fs))
        if b - n >= 0:
            r = _quiet(lambda b=b: ppg_resp_rate(pleth[b - n : b], fs))
            if isinstance(r, float) and RR_RANGE[0] <= r <= RR_RANGE[1]:
                out[i] = r
    return out


# ---------------------------------------------------------------------------- one record


def bench_record(entry: dict, tmp: Path, peers: bool) -> dict:
    """Every row of one record (module docstring) and its per-second series."""
    rec = entry["record"]
    header = read_header(Path(rec))
    chans = [strip_name(c) for c in header.sig_name]
    keys = {channel_key(c) for c in chans}
    runs, notes = [], []
    try:
        models = vitals_for(chans)
    except ShippedModelMissing:
        models = []
    if models:
        runs.append(("as recorded", models, rec, VALID))
        if "pleth" in keys:
            runs.append(("PLETH inverted", models, variant(rec, tmp, "inverted"), VALID))
    if "ii" in keys and "pleth" not in keys:
        pe = [shipped("vitals-ppg-ecg-hr"), shipped("vitals-ppg-ecg-rr")]
        runs.append(
            (
                "flat PLETH added: ECG alone, 'no signal' status ignored",
                pe,
                variant(rec, tmp, "flat"),
                FLAT_VALID,
            )
        )
    if not runs:
        notes.append("no shipped model")
    out = {
        "name": entry["name"],
        "split": entry["split"],
        "channels": chans,
        "fs": float(header.fs),
        "duration_s": entry["duration_s"],
        "runs": [],
        "peers": {},
        "notes": notes,
        "reference": entry.get("reference"),
    }
    num = signals_by_name(read_record(Path(rec).with_name(Path(rec).name + "n")))
    readings = {"hr": num.get("HR"), "rr": num.get("RESP")}
    scored: dict[str, np.ndarray] = {}  # target -> mask of the first run's scored seconds
    times: dict[str, np.ndarray] = {}
    refs: dict[str, np.ndarray] = {}
    for label, models_, path, valid in runs:
        t0 = time.perf_counter()
        s = stream(models_, path)
        for t, d in s.items():
            if t not in WITHIN or readings.get(t) is None:
                continue
            ref = window_reference(readings[t], d["time"], d["window"])
            ok = np.isin(d["status"], valid) & (d["time"] >= d["window"])  # never warm-up
            est = np.where(ok, d["value"], np.nan)
            row = {
                "label": label,
                "model": d["model"],
                "target": t,
                "window": d["window"],
                **metrics(est, ref, WITHIN[t]),
                "time": d["time"],
                "estimate": est,
                "status": d["status"],
            }
            if t not in scored:
                scored[t] = np.isfinite(est) & np.isfinite(ref)
                times[t], refs[t] = d["time"], ref
            out["runs"].append(row)
        print(
            f"  {entry['name']}: {label} streamed in {time.perf_counter() - t0:.1f} s", flush=True
        )
    # polarity: |est(x) - est(-x)| where both valid
    for t in ("hr", "rr"):
        a = [r for r in out["runs"] if r["target"] == t and r["label"] == "as recorded"]
        b = [r for r in out["runs"] if r["target"] == t and r["label"] == "PLETH inverted"]
        if a and b and len(a[0]["estimate"]) == len(b[0]["estimate"]):
            d = np.abs(a[0]["estimate"] - b[0]["estimate"])
            d = d[np.isfinite(d)]
            b[0]["polarity"] = {
                "n": int(len(d)),
                "median": float(np.median(d)) if len(d) else math.nan,
                "p95": float(np.percentile(d, 95)) if len(d) else math.nan,
            }
    for t in list(scored):
        if readings.get(t) is None or not np.isfinite(readings[t]).any():
            out["notes"].append(f"no {t.upper()} reference (the record has no sensor for it)")
            del scored[t]
    if "PLETH" in chans:
        out["app_polarity"] = app_polarity(rec)
    if peers and scored:
        rec_sig = read_record(Path(rec))
        sig = {
            strip_name(c): np.asarray(rec_sig.p_signal[:, i], np.float64)
            for i, c in enumerate(rec_sig.sig_name)
        }
        fs = float(rec_sig.fs)
        t0 = time.perf_counter()
        ev, pnotes = peer_events(sig, fs)
        out["notes"] += pnotes
        for (t, name), events in ev.items():
            if t not in scored:
                continue
            lo_hi, k = (HR_RANGE, 3) if t == "hr" else (RR_RANGE, 2)
            w = next(r["window"] for r in out["runs"] if r["target"] == t)
            est = trailing_rate(events, times[t], fs, w, k, lo_hi)
            _peer(out, t, name, est, scored[t], refs[t], events is None)
        if "rr" in scored and "PLETH" in sig:
            w = next(r["window"] for r in out["runs"] if r["target"] == "rr")
            est = ppg_rr(sig["PLETH"], fs, times["rr"], w)
            _peer(
                out,
                "rr",
                "NeuroKit2 PPG-derived (bidmc_baseline)",
                est,
                scored["rr"],
                refs["rr"],
                False,
            )
        if "rr" in scored:
            const = np.full(len(times["rr"]), RR_CONSTANT)
            _peer(
                out,
                "rr",
                f"constant {RR_CONSTANT:g} (fixed in advance)",
                const,
                scored["rr"],
                refs["rr"],
                False,
            )
        print(f"  {entry['name']}: peers in {time.perf_counter() - t0:.1f} s", flush=True)
    out["times"] = {t: v for t, v in times.items()}
    out["refs"] = refs
    return out


def app_polarity(rec: str) -> dict:
    """The sign the app's PPG polarity rule (apps/vitals/ppg_polarity.py) gives the recorded PLETH:
    on its first 8 s (the app decides on the first 8 s its signal-quality index passes) and
    the share of all 8-s windows it calls upright."""
    from liquid_stream.apps.vitals.ppg_polarity import polarity

    r = read_record(Path(rec))
    i = [channel_key(c) for c in r.sig_name].index("pleth")
    x, fs = np.asarray(r.p_signal[:, i], np.float64), float(r.fs)
    n = int(round(8 * fs))
    signs = [polarity(x[a : a + n], fs) for a in range(0, len(x) - n + 1, n)]
    return {
        "first_8s": signs[0] if signs else None,
        "upright_share": float(np.mean(np.array(signs) > 0)) if signs else math.nan,
    }


def _peer(out, t, name, est, mask, ref, failed):
    e = np.where(mask, est, np.nan)
    out["peers"].setdefault(t, []).append(
        {
            "name": name,
            **metrics(e, np.where(mask, ref, np.nan), WITHIN[t]),
            "estimate": e,
            "failed": failed,
            "n_scored": int(mask.sum()),
        }
    )


# ---------------------------------------------------------------------------- output


def _f(v, fmt="{:.2f}") -> str:
    return "–" if v is None or (isinstance(v, float) and not math.isfinite(v)) else fmt.format(v)


def table(results: list[dict]) -> list[str]:
    rows = [
        "| record | target | estimator | n s | RMSE | MAE | bias | within | note |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        if not r["runs"]:
            rows.append(f"| {r['name']} | | no shipped model | | | | | | |")
        ref = r.get("reference") or ""
        for t in ("hr", "rr"):
            tol = WITHIN[t]
            for run in (x for x in r["runs"] if x["target"] == t):
                note = ""
                if "polarity" in run:
                    p = run["polarity"]
                    note = (
                        f"median \\|{t.upper()}(x)−{t.upper()}(−x)\\| {_f(p['median'])}, "
                        f"p95 {_f(p['p95'])} (n {p['n']})"
                    )
                if "polarity" in run and "app_polarity" in r:
                    ap_ = r["app_polarity"]
                    note += (
                        f"; app polarity rule on the recorded PLETH: first 8 s "
                        f"{ap_['first_8s']:+d}, {100 * ap_['upright_share']:.0f} % of 8-s "
                        "windows upright"
                    )
                if t == "hr" and ref == "ppg-peaks":
                    note = (note + "; " if note else "") + "ref: PPG peaks (lower trust)"
                rows.append(
                    f"| {r['name']} | {t.upper()} | {run['model']} ({run['label']}) | {run['n']} "
                    f"| {_f(run['rmse'])} | {_f(run['mae'])} | {_f(run['bias'], '{:+.2f}')} | "
                    f"±{tol:g}: {_f(run['within'], '{:.1f}')} % | {note} |"
                )
            for p in r["peers"].get(t, []):
                note = "failed" if p["failed"] else ""
                rows.append(
                    f"| {r['name']} | {t.upper()} | {p['name']} | {p['n']}/{p['n_scored']} | "
                    f"{_f(p['rmse'])} | {_f(p['mae'])} | {_f(p['bias'], '{:+.2f}')} | "
                    f"±{tol:g}: {_f(p['within'], '{:.1f}')} % | {note} |"
                )
    return rows


def plot(r: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    targets = [t for t in ("hr", "rr") if t in r["times"]]
    if not targets:
        return
    fig, axes = plt.subplots(len(targets), 1, figsize=(12, 3.2 * len(targets)), squeeze=False)
    for ax, t in zip(axes[:, 0], targets, strict=True):
        x = r["times"][t]
        ax.plot(x, r["refs"][t], color="k", lw=1.6, label="reference (window mean)")
        for i, run in enumerate(x_ for x_ in r["runs"] if x_["target"] == t):
            ax.plot(
                run["time"],
                run["estimate"],
                lw=1.2,
                ls="-" if i == 0 else "--",
                color=f"C{i}",
                label=f"{run['model']} ({run['label'][:30]})",
            )
        for j, p in enumerate(r["peers"].get(t, [])):
            if np.isfinite(p["estimate"]).any() and not p["name"].startswith("constant"):
                ax.plot(x, p["estimate"], lw=0.7, alpha=0.7, color=f"C{j + 3}", label=p["name"])
        ax.set_ylabel(f"{t.upper()} [{'bpm' if t == 'hr' else 'breaths/min'}]")
        ax.legend(fontsize=6, ncol=3, loc="upper right")
        ax.grid(alpha=0.3)
    axes[0, 0].set_title(f"{r['name']} ({r['split']}): {', '.join(r['channels'])} @ {r['fs']:g} Hz")
    axes[-1, 0].set_xlabel("time [s]")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _jsonable(o):
    if isinstance(o, np.ndarray):
        return [None if not np.isfinite(v) else round(float(v), 4) for v in o.astype(float)]
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, float) and not math.isfinite(o):
        return None
    raise TypeError(type(o).__name__)


def _clean(o):
    if isinstance(o, dict):
        return {str(k): _clean(v) for k, v in o.items()}
    if isinstance(o, list):
        return [_clean(v) for v in o]
    if isinstance(o, float) and not math.isfinite(o):
        return None
    return o


def git_state() -> str:
    root = Path(__file__).resolve().parents[1]
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "-uno"],
            capture_output=True,
            text=True,
        ).stdout.split("\n")
        dirty = [ln[3:] for ln in dirty if ln.strip()]
    except OSError:
        return "unknown"
    return head + (f" + uncommitted changes to {', '.join(dirty)}" if dirty else "")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("data", type=Path, help="a folder from `liquid-stream data real-samples`")
    ap.add_argument("--out", type=Path, default=Path("runs/real-bench"))
    ap.add_argument("--records", default=None, help="comma-separated record names")
    ap.add_argument("--only", choices=("dev", "final", "all"), default="all")
    ap.add_argument("--no-peers", action="store_true", help="the models only")
    args = ap.parse_args(argv)
    command = "python " + shlex.join(
        ["bench/vitals_real.py", *(sys.argv[1:] if argv is None else argv)]
    )
    try:
        entries = read_manifest(args.data)
    except RealSamplesError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.records:
        want = [n.strip() for n in args.records.split(",") if n.strip()]
        unknown = sorted(set(want) - {e["name"] for e in entries})
        if unknown:
            print(f"error: no records {', '.join(unknown)} in {args.data}", file=sys.stderr)
            return 2
        entries = [e for e in entries if e["name"] in want]
    if args.only != "all":
        entries = [e for e in entries if e["split"] == args.only]
    state = git_state()
    print(f"Command: `{command}`\nCode: {state}\n", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    results = []
    with tempfile.TemporaryDirectory(prefix="vitals-real-") as tmp:
        for e in entries:
            r = bench_record(e, Path(tmp) / e["name"], not args.no_peers)
            results.append(r)
            plot(r, args.out / f"{e['name']}.png")
            (args.out / f"{e['name']}.json").write_text(
                json.dumps(_clean(r), default=_jsonable, indent=1) + "\n"
            )
    lines = [f"Command: `{command}`", "", f"Code: {state}", ""]
    for split, title in (
        ("dev", "Development records"),
        ("final", "FINAL CHECKS (held out: never tune on these records)"),
    ):
        rs = [r for r in results if r["split"] == split]
        if not rs:
            continue
        lines += [f"### {title}", "", *table(rs), ""]
        for r in rs:
            for n in dict.fromkeys(r["notes"]):
                lines.append(f"- {r['name']}: {n}")
        lines.append("")
    lines += [
        "† the peer uses the reference's own detector on the reference's channel.",
        "Peers: events on the whole record, 60 / median interval in the model's "
        "trailing window (32 s), on the model row's scored seconds (n shown as "
        "scored/available).",
    ]
    text = "\n".join(lines)
    print("\n" + text)
    (args.out / "results.md").write_text(text + "\n")
    summary = [{k: v for k, v in r.items() if k not in ("times", "refs")} for r in results]
    for r in summary:
        r["runs"] = [
            {k: v for k, v in x.items() if k not in ("time", "estimate", "status")}
            for x in r["runs"]
        ]
        r["peers"] = {
            t: [{k: v for k, v in p.items() if k != "estimate"} for p in ps]
            for t, ps in r["peers"].items()
        }
    (args.out / "results.json").write_text(
        json.dumps(
            _clean({"command": command, "code": state, "records": summary}),
            default=_jsonable,
            indent=1,
        )
        + "\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
