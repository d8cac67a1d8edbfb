"""Classical (NeuroKit2 peak-detection) HR / RR estimates on the same windows as the model.

For each window of a :class:`~.bidmc.Windows` the estimate is a rate from detected peaks::

    rate = 60 * fs / median(diff(peak samples inside the window))     [per minute]

WFDB windows (record ids and start samples known): the channels are read from the records
in ``root`` and the peaks are detected once per whole record, then counted per window (no
window-edge effects). The baseline reads the channels the model reads (a PPG-only model is
compared with NeuroKit2 on the PPG alone), except that RR uses a RESP channel whenever the
record has one — an advantage for the baseline, since no model sees RESP:

- **HR**: ECG lead II R-peaks (``nk.ecg_clean`` + ``nk.ecg_peaks``, NeuroKit method) — the
  monitor's HR numeric is ECG-derived; if that fails in a window (< 3 peaks or a rate
  outside 25-250 bpm), or the model has no II, the PPG systolic peaks (``nk.ppg_clean`` +
  ``nk.ppg_findpeaks``, Elgendi) are used instead.
- **RR**: RESP channel (impedance pneumography) breath peaks (``nk.rsp_clean`` +
  ``nk.rsp_peaks``, Khodadad 2018); >= 2 peaks and 3-60 breaths/min required. A record
  without RESP: the PPG-derived respiration below, per window.

Monash ``.ts`` windows (no records): the window's own channels, per window: HR as above from
its II then PLETH; RR from PPG-derived respiration: the heights of the raw PPG at its
systolic peaks (respiratory-induced amplitude and intensity variation together; on the
simulator they beat the band-passed amplitudes, RMSE 4.2 vs 8.4 breaths/min) interpolated
to 4 Hz, detrended, and the frequency of the largest periodogram peak in 0.08-0.75 Hz
(4.8-45 breaths/min) x 60.

**SpO2** (NeuroKit2 has no estimator): the textbook ratio of ratios from the oximeter's raw
IR and red intensity channels, when the model reads them (:func:`ratio_spo2`)::

    l = ln(max(x, tiny))  band-passed 0.5-5 Hz (2nd-order Butterworth, zero phase), per channel
    R_k = cov(l_red, l_ir) / var(l_ir)   over each 4 s segment k of the window (AC/DC of red
                                         over AC/DC of IR, least squares)
    R = median_k R_k
    SpO2 = clip(110 - 25 R, 50, 100)     (the linear calibration of the simulator, and of
                                          textbooks; real devices fit their own curve)

ln turns each channel's AC/DC into an amplitude, so R needs no DC estimate; the regression
slope ignores red noise uncorrelated with the IR pulse; the median over segments rejects a
motion burst shorter than half the window (over the whole window at once: RMSE 5.19 % vs
3.26 % for the median, 1080 windows of 40 records of simulator seed 7, not a test set).
Without IR and red (a PLETH-only model): all-NaN (report "n/a"); a single PLETH carries no
SpO2 (docs/benchmarks.md §5.2).

A window where the method fails gets NaN; :func:`baseline_rmse` counts them.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Sequence

import numpy as np

from liquid_stream.io.bidmc_vocab import channel_key

from .bidmc import SAMPLE_RATE, BidmcDataError, Windows, read_whole_record, wfdb_dir

HR_RANGE = (25.0, 250.0)
RR_RANGE = (3.0, 60.0)


def _fill_nan(x: np.ndarray) -> np.ndarray:
    """Linear interpolation over NaNs (NeuroKit's filters do not accept them)."""
    x = np.asarray(x, np.float64)
    bad = ~np.isfinite(x)
    if bad.all():
        return np.zeros_like(x)
    if bad.any():
        i = np.arange(len(x))
        x = x.copy()
        x[bad] = np.interp(i[bad], i[~bad], x[~bad])
    return x


def _peaks(find: Callable) -> np.ndarray:
    """Peak indices ``find(neurokit2)`` with NeuroKit's warnings silenced; none if it fails."""
    import neurokit2 as nk

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return np.asarray(find(nk), np.int64)
        except Exception:
            return np.zeros(0, np.int64)


def ecg_peaks(x: np.ndarray, fs: float) -> np.ndarray:
    def find(nk):
        _, info = nk.ecg_peaks(nk.ecg_clean(_fill_nan(x), sampling_rate=fs), sampling_rate=fs)
        return info["ECG_R_Peaks"]

    return _peaks(find)


def ppg_peaks(x: np.ndarray, fs: float) -> np.ndarray:
    def find(nk):
        clean = nk.ppg_clean(_fill_nan(x), sampling_rate=fs)
        return nk.ppg_findpeaks(clean, sampling_rate=fs)["PPG_Peaks"]

    return _peaks(find)


def rsp_peaks(x: np.ndarray, fs: float) -> np.ndarray:
    def find(nk):
        _, info = nk.rsp_peaks(nk.rsp_clean(_fill_nan(x), sampling_rate=fs), sampling_rate=fs)
        return info["RSP_Peaks"]

    return _peaks(find)


def rate_in_window(
    peaks: np.ndarray, start: int, length: int, fs: float, min_peaks: int, lo_hi: tuple
) -> float:
    """60 * fs / median inter-peak interval of the peaks in [start, start + length); NaN if
    fewer than ``min_peaks`` or the rate is outside ``lo_hi``."""
    p = peaks[(peaks >= start) & (peaks < start + length)]
    if len(p) < min_peaks:
        return float("nan")
    rate = 60.0 * fs / float(np.median(np.diff(p)))
    return rate if lo_hi[0] <= rate <= lo_hi[1] else float("nan")


def ppg_resp_rate(pleth: np.ndarray, fs: float) -> float:
    """RR (breaths/min) from the respiratory amplitude variation of a PPG window; NaN if
    fewer than 6 beats."""
    x = _fill_nan(pleth)
    pk = ppg_peaks(x, fs)
    if len(pk) < 6:
        return float("nan")
    amp = x[pk]  # raw peak heights: amplitude + baseline modulation together
    grid = np.arange(pk[0], pk[-1], fs / 4.0)  # 4 Hz
    if len(grid) < 16:
        return float("nan")
    s = np.interp(grid, pk, amp)
    s = s - np.polyval(np.polyfit(np.arange(len(s)), s, 1), np.arange(len(s)))
    n_fft = max(1024, int(2 ** np.ceil(np.log2(len(s)))))
    spec = np.abs(np.fft.rfft(s * np.hanning(len(s)), n_fft)) ** 2
    f = np.fft.rfftfreq(n_fft, d=0.25)
    band = (f >= 0.08) & (f <= 0.75)
    if not band.any() or spec[band].max() <= 0:
        return float("nan")
    return float(60.0 * f[band][np.argmax(spec[band])])


def _hr(ecg_pk, ppg_pk, start, length, fs) -> float:
    r = rate_in_window(ecg_pk, start, length, fs, 3, HR_RANGE) if ecg_pk is not None else np.nan
    if np.isnan(r) and ppg_pk is not None:
        r = rate_in_window(ppg_pk, start, length, fs, 3, HR_RANGE)
    return float(r)


def window_rate(
    target: str,
    start: int,
    length: int,
    fs: float,
    ecg_pk: np.ndarray | None = None,
    ppg_pk: np.ndarray | None = None,
    rsp_pk: np.ndarray | None = None,
    pleth: np.ndarray | None = None,
) -> float:
    """NeuroKit2's estimate of ``target`` over samples [start, start + length) of a whole
    record, from the peaks found on it (None: channel not used): HR from the ECG's R peaks,
    the PPG's where that fails; RR from the RESP peaks, else from the respiratory modulation
    of ``pleth`` (the record's PPG samples); NaN where it fails and for any other target
    (no classical SpO2 estimate)."""
    if target == "hr":
        return _hr(ecg_pk, ppg_pk, start, length, fs)
    if target != "rr":
        return float("nan")
    if rsp_pk is not None:
        return rate_in_window(rsp_pk, start, length, fs, 2, RR_RANGE)
    if pleth is not None:
        r = ppg_resp_rate(pleth[start : start + length], fs)
        return r if RR_RANGE[0] <= r <= RR_RANGE[1] else float("nan")
    return float("nan")


SPO2_BAND_HZ = (0.5, 5.0)  # the cardiac band of the ratio of ratios
SPO2_SEGMENT_S = 4.0  # R is the median of the per-segment ratios (>= 2 beats at 40 bpm)


def baseline_name(target: str) -> str:
    """What the classical estimate of ``target`` is called in tables and plots."""
    return "ratio of ratios" if target == "spo2" else "NeuroKit2"


def ratio_spo2(ir: np.ndarray, red: np.ndarray, fs: float) -> float:
    """SpO2 (%) of one window of raw IR and red intensities (module docstring); NaN if the
    window has no pulsatile IR signal."""
    from scipy.signal import butter, sosfiltfilt

    sos = butter(2, SPO2_BAND_HZ, btype="bandpass", fs=fs, output="sos")
    li, lr = (sosfiltfilt(sos, np.log(np.maximum(_fill_nan(x), 1e-30))) for x in (ir, red))
    seg = int(round(SPO2_SEGMENT_S * fs))
    n = max(1, len(li) // seg)
    ratios = []
    for k in range(n):
        a, b = k * seg, (k + 1) * seg if k < n - 1 else len(li)
        var = float(li[a:b] @ li[a:b])
        if np.isfinite(var) and var > 0:
            ratios.append(float(lr[a:b] @ li[a:b]) / var)
    if not ratios:
        return float("nan")
    return float(np.clip(110.0 - 25.0 * np.median(ratios), 50.0, 100.0))


def _find(names: Sequence[str], want: str) -> int | None:
    for i, n in enumerate(names):
        if channel_key(n) == channel_key(want):
            return i
    return None


def record_peaks(rec, channels: Sequence[str], target: str) -> dict:
    """The inputs :func:`window_rate` needs for ``target`` on a whole WFDB record ``rec``
    (``read_whole_record``), as keyword arguments: the baseline reads the channels the model
    reads (``channels``), except that RR uses a RESP channel whenever the record has one
    (models never see RESP); RR without RESP uses the PPG's respiratory modulation."""
    fs, reads = float(rec.fs), {channel_key(c) for c in channels}

    def col(ch: str) -> np.ndarray | None:
        if channel_key(ch) not in reads and not (ch == "RESP" and target == "rr"):
            return None
        i = _find(rec.sig_name, ch)
        return None if i is None else rec.p_signal[:, i]

    ii, pleth, resp = col("II"), col("PLETH"), col("RESP")
    hr = target == "hr"
    return {
        "ecg_pk": ecg_peaks(ii, fs) if hr and ii is not None else None,
        "ppg_pk": ppg_peaks(pleth, fs) if hr and pleth is not None else None,
        "rsp_pk": rsp_peaks(resp, fs) if not hr and resp is not None else None,
        "pleth": pleth if not hr else None,
    }


def baseline_estimates(
    root: str | os.PathLike | None,
    windows: Windows,
    target: str,
    sample_rate: float = SAMPLE_RATE,
) -> np.ndarray:
    """(n,) classical estimates of ``target`` for each window (NaN where it fails; SpO2 all
    NaN unless the windows carry IR and RED). See the module docstring for the methods."""
    n = len(windows)
    out = np.full(n, np.nan)
    if target == "spo2":
        i_ir, i_red = _find(windows.channels, "IR"), _find(windows.channels, "RED")
        if i_ir is None or i_red is None:
            return out
        fs = float(sample_rate)
        for j in range(n):  # the model's own windows carry the raw intensities
            out[j] = ratio_spo2(windows.x[j][:, i_ir], windows.x[j][:, i_red], fs)
        return out
    if target not in ("hr", "rr"):
        raise BidmcDataError(f"no baseline for target {target!r} (hr, rr, spo2)")
    length = windows.x.shape[1]
    if windows.has_records and n:
        if root is None:
            raise BidmcDataError("WFDB windows need the records' root for the baseline")
        d = wfdb_dir(root)
        for name in np.unique(windows.record):
            rec = read_whole_record(d / str(name), str(name))
            peaks = record_peaks(rec, windows.channels, target)
            for j in np.flatnonzero(windows.record == name):
                out[j] = window_rate(target, int(windows.start[j]), length, float(rec.fs), **peaks)
        return out
    fs = float(sample_rate)
    i_ecg, i_ppg = _find(windows.channels, "II"), _find(windows.channels, "PLETH")
    for j in range(n):
        x = windows.x[j]  # (L, C)
        if target == "hr":
            e = ecg_peaks(x[:, i_ecg], fs) if i_ecg is not None else None
            p = ppg_peaks(x[:, i_ppg], fs) if i_ppg is not None else None
            out[j] = _hr(e, p, 0, length, fs)
        elif i_ppg is not None:
            r = ppg_resp_rate(x[:, i_ppg], fs)
            out[j] = r if RR_RANGE[0] <= r <= RR_RANGE[1] else np.nan
    return out


def agreement(pred: np.ndarray, y: np.ndarray, within: float | None = None) -> dict:
    """Errors of ``pred`` against ``y`` over the pairs where both are finite: ``n``,
    ``n_failed`` (the others), RMSE, MAE, bias mean(pred − y), the half-width of the
    Bland–Altman 95 % limits of agreement 1.96 · sd(pred − y), the least-squares slope of
    pred on y (1 = follows the truth over its range), and with ``within`` the fraction of
    pairs with |pred − y| ≤ within (NaN when n = 0)."""
    pred = np.asarray(pred, np.float64)
    y = np.asarray(y, np.float64)
    ok = np.isfinite(pred) & np.isfinite(y)
    err = pred[ok] - y[ok]
    nan = float("nan")
    yc = y[ok] - y[ok].mean() if ok.any() else y[ok]
    row = {
        "n": int(ok.sum()),
        "n_failed": int((~ok).sum()),
        "rmse": float(np.sqrt(np.mean(err**2))) if ok.any() else nan,
        "mae": float(np.mean(np.abs(err))) if ok.any() else nan,
        "bias": float(err.mean()) if ok.any() else nan,
        "loa": float(1.96 * err.std()) if ok.any() else nan,
        "slope": float(yc @ (pred[ok] - pred[ok].mean()) / (yc @ yc)) if yc @ yc > 0 else nan,
    }
    if within is not None:
        row["within"] = float(np.mean(np.abs(err) <= within)) if ok.any() else nan
    return row


def baseline_rmse(pred: np.ndarray, y: np.ndarray) -> dict:
    """RMSE / MAE over the windows where ``pred`` is finite, plus how many failed."""
    a = agreement(pred, y)
    return {"rmse": a["rmse"], "mae": a["mae"], "n_valid": a["n"], "n_failed": a["n_failed"]}
