"""Domain-randomised vital-sign records: BIDMC-shaped WFDB pairs whose physiology, waveform
morphology, noise, artefacts and units are drawn per record from wide documented ranges.

Same on-disk layout and record structure as :mod:`.bidmc_sim` (written with its
``write_record``; read by :mod:`.bidmc`)::

    OUT/bidmcNN.hea + .dat      125 Hz, format 16: "RESP," "PLETH," "V," "AVR," "II," and
                                the oximeter's raw intensities "IR," "RED," (revision 2)
    OUT/bidmcNNn.hea + .dat     1 Hz numerics: "HR," "PULSE," "RESP," "SpO2," (integers, NaN gaps)
    OUT/RECORDS                 one record name a line (bidmc01, bidmc01n, ...)
    OUT/bidmc01.beats.npy ...   the record's R-peak times (s from its first sample; the
                                beat targets of ``data.beats``, training/data/vitals/bidmc_crops.py)
    OUT/params.json             the stamp's keys + "per_record": {name: family and every draw}
    OUT/.vitals-sim-stamp.json  what was generated

Everything is a pure function of ``(seed, record index)``: record ``i`` uses
``np.random.default_rng([seed, i])`` and the family ``families[i % len(families)]``. Inside a
record each component (trajectories, breaths, beats, morphology, modulation, noise,
artefacts, sensor-off, scaling, numerics) draws from its own child stream, so forcing a
draw (``force=``) leaves the other components' draws unchanged, switching the scaling off
(``scaling=False``) changes no draw at all, and the two families of one ``(seed, index)``
share their trajectories, beats, breaths and labels (paired cross-generator records).

**Events and labels (exact definitions).** Beats are an explicit list of R-peak times
``t_j`` (s) made by an inter-beat-interval process; breaths are an explicit list of breath
onset times ``b_j``. For event times ``e_j`` with intervals ``d_j = e_(j+1) - e_j`` and
midpoints ``m_j = (e_j + e_(j+1)) / 2``, the rate at time ``q`` over a window ``w`` is::

    rate(q) = 60 / mean{ d_j : q - w/2 <= m_j < q + w/2 }    (the nearest interval if none)

HR uses the beats with ``w = HR_WINDOW_S = 8`` s, PULSE the pulse arrivals ``t_j + PTT`` with
the same window, RR the breaths with ``w = RR_WINDOW_S = 16`` s. ``truth["hr"]`` and
``truth["rr"]`` (T,) are ``rate(i / fs)`` at every sample; the numeric of second ``k`` (it
covers ``[k, k + 1)`` s, as in :mod:`.bidmc_sim`) is ``round(rate(k + 0.5))``.
``truth["spo2"]`` is the SpO2 trajectory at fs; its numeric is the mean over the second,
rounded (as in :mod:`.bidmc_sim`). PULSE and SpO2 are NaN for every second that overlaps a
PLETH sensor-off stretch (an oximeter shows nothing), and with probability 0.2 for a 5-20 s
probe dropout (as in :mod:`.bidmc_sim`); HR and RESP are always the truth.
``truth["sensor_off"]`` is ``{"ppg", "ecg", "resp"}`` -> (T,) bool. The trajectories are
clipped to the ranges below; labels measured from the beats can leave them a little (HRV,
compensatory pauses, AF: e.g. 39 or 183 bpm).

**Randomised factors** (``U(a, b)`` uniform, ``LU`` log-uniform; "chosen" = a design choice).

=============================  ===========================================  ==================
factor                         range / distribution                         source of range
=============================  ===========================================  ==================
HR baseline, trajectory        U(45, 170) bpm; smoothed noise SD U(1, 8)    AHA: resting 60-100,
                               bpm, time scale U(20, 90) s; clipped 40-180  brady <60, tachy
                                                                            >100; max ~220-age
HR abrupt changes              step p=0.5, +-U(10, 40) bpm over U(1, 10) s; chosen
                               ramp p=0.3, +-U(10, 50) bpm over U(30, 180) s
RR baseline, trajectory        U(8, 35) /min (``rr_base``: other spans,     adult normal 12-20
                               e.g. 6-9 and 34-37 for the range's ends);    (vital-sign texts);
                               SD U(0.5, 3), U(20, 90) s; clipped 6-40      6-40 issue 20
RR abrupt changes              step p=0.3 +-U(3, 12); ramp p=0.2 +-U(3, 12) chosen
SpO2 baseline, trajectory      U(86, 100) %; SD U(0.2, 1.5); clipped 80-100 normal 95-100;
                                                                            oximeter accuracy
                                                                            spec 70-100 (ISO
                                                                            80601-2-61)
SpO2 desaturations / steps     dip p=0.4, U(3, 12) % for U(15, 60) s SD;    chosen
                               step p=0.2, +-U(2, 6) %
HRV: LF (Mayer) modulation     IBI x (1 + a sin(2 pi f t)), a U(0, 0.05),   ESC/NASPE HRV Task
                               f U(0.04, 0.15) Hz                           Force 1996 (LF band)
HRV: RSA (HF)                  IBI x (1 - a r(t)), a U(0.005, 0.05),        HF band 0.15-0.4 Hz
                               r = -cos(2 pi breath phase) / 2              (same); size chosen
HRV: white IBI jitter          SD U(0.005, 0.03) of the IBI                 chosen
Ectopic (premature) beats      p=0.3 per record; per beat U(0.005, 0.1);    chosen; full
                               coupling U(0.55, 0.8) x IBI, compensatory    compensatory pause
                               pause (2 - c) x IBI; kind pac / pvc          of PVCs (textbook;
                               (PACs get the full pause too: a simplifi-    real PACs often
                               cation)                                      reset the sinus)
Ectopy-rich records            ``ectopy="rich"`` only (below): pattern per  chosen (textbook
(``ectopy="rich"``)            record isolated 0.3 / bigeminy 0.25 /        patterns; a PVC
                               trigeminy 0.15 / couplets 0.15 / runs 0.15;  burden >10 % is
                               isolated burden U(0.1, 0.4) of the beats;    usually called
                               bi/trigeminy whole record p=0.4, else 1-3    frequent; 3+
                               episodes of U(20, 120) s, isolated at        PVCs in a row =
                               U(0, 0.1) per beat otherwise; couplets       non-sustained VT);
                               U(0.05, 0.2), runs of 3-6 U(0.02, 0.08) per  the probabilities
                               sinus beat; run intervals U(0.5, 0.8) x IBI; and sizes chosen
                               kind pvc p=0.85
AF episode                     p=0.15, U(30, 240) s; IBI x lognormal with   "irregularly
                               CV U(0.1, 0.25); no P wave (param family),   irregular" RR (ESC
                               f-waves U(4, 9) Hz, U(0.02, 0.1) mV          AF guideline); f 4-9
Breaths                        interval 60 / RR x lognormal, CV U(0.02,     chosen
                               0.2); depth x lognormal, CV U(0.05, 0.3)
Breath shape (param)           raised-cosine inspiration, fraction U(0.3,   I:E ~1:2 (textbook)
                               0.5); expiration U(0.5, 1) of the rest
Breath shape (nk2)             NeuroKit2 ``rsp_simulate(breathmetrics)``    NeuroKit2
                               mean trough-to-trough breath
ECG (param): P, Q, R, S, T     P U(0.05, 0.25) mV, PR U(0.12, 0.22) s;      normal ECG intervals
Gaussian waves (ECGSYN-style)  QRS U(0.06, 0.12) s, Q U(0, 0.3), S U(0,     (PR 0.12-0.20, QRS
                               0.6) mV (negative); T U(-0.4, 0.6) mV (sign  <0.12 s); McSharry
                               = polarity), peak U(0.22, 0.34) x sqrt(RR)   et al. 2003 ECGSYN
                               s after R (Bazett), width U(0.04, 0.08) s    (Gaussian waves)
PVC morphology (param)         no P, QRS x U(1.8, 2.5), R x U(0.8, 1.6),    chosen (wide QRS,
                               T opposite to QRS, x U(1, 2)                 discordant T)
ECG (nk2)                      ``ecg_simulate`` method simple or ecgsyn;    NeuroKit2 / McSharry
                               ecgsyn ti +-U(0, 10) deg, ai P x U(0.5,      2003 defaults
                               1.5), T x U(-0.5, 1.5), bi QRS x U(0.7, 1.5)
Leads                          II x U(0.5, 1.5) (inverted p=0.1); AVR = -U( chosen (lead
                               0.3, 0.8) x II (flipped p=0.1); V U(0.3,     polarity /
                               1.5) (inverted p=0.2), delay U(0, 20) ms     placement)
PPG (param): 2-3 waves/beat    shape gauss or lognormal; systolic peak      Charlton et al.
(phase = fraction of the IBI)  U(0.10, 0.25), width U(0.03, 0.10);          2022 PPG review;
                               reflected/dicrotic ratio U(0, 0.95), delay   Tang et al. 2020
                               U(0.15, 0.35), width U(0.04, 0.12); late     (two-Gaussian PPG);
                               wave p=0.5, ratio U(0, 0.4), +U(0.1, 0.25),  issue 20 experiment
                               width U(0.05, 0.15)
PPG (nk2)                      ``ppg_simulate`` mean beat (its own random   NeuroKit2
                               landmarks)
Pulse arrival time (R->foot)   U(0.15, 0.35) s                              chosen (finger PAT
                                                                            ~0.2-0.3 s)
Beat-to-beat pulse amplitude   (prev IBI / nominal IBI) ^ U(0.5, 1.5),      chosen (Frank-
                               clipped 0.3-1.3                              Starling; AF pulse
                                                                            deficit)
Respiratory modulation         PPG AM U(0.05, 0.3), BW U(0.05, 0.4);        Charlton et al. 2018
                               ECG AM U(0.02, 0.2), BW U(0, 0.15) mV;       (BW/AM/FM review);
                               FM = RSA above                               sizes chosen
Low perfusion                  p=0.2: pulse x U(0.05, 0.3) (noise kept)     chosen
RESP channel                   breath x U(0.3, 1); cardiogenic U(0, 0.1) x  chosen
                               the PPG volume pulse
Baseline wander                0.05-0.3 Hz (bidmc_sim._wander); PPG U(0,    chosen
                               0.3), ECG U(0, 0.3) mV, RESP U(0, 0.2)
White noise                    PPG U(0.002, 0.03), ECG U(0.005, 0.05) mV,   chosen
                               RESP U(0.002, 0.02)
Powerline                      50 or 60 Hz, U(0, 0.1) mV x U(0, 1) per      mains frequencies;
                               lead; PPG 0.1 x that                         sizes chosen
EMG                            first-difference white noise SD U(0, 0.05)   chosen
                               mV, x U(2, 10) during motion
Motion artefact bursts         Poisson U(0, 2) / min, U(1, 10) s, smoothing chosen
                               U(0.02, 0.2) s, amplitude U(0.5, 3) x pulse
                               (PPG p=0.9, ECG p=0.5, RESP p=0.7 per burst)
Sensor-off stretches           per group (ppg / ecg / resp) p=0.15, 1-2     chosen
                               stretches of U(2, 30) s; flat or NaN
Per-channel gain               LU(0.01, 100)                                issue 20
Per-channel offset             U(-1000, 1000) units                         issue 20
ADC quantisation               {10, 12, 14, 16} bits over U(1.2, 4) x the   chosen
                               channel's span (step = full scale / 2^bits)
Oximeter: IR perfusion index   k_ir LU(0.003, 0.05) (AC/DC of IR, x the     Lima & Bakker 2002
                               low-perfusion factor above)                  (PI ~0.3-10 %)
Oximeter: red / IR DC          LU(0.32, 3.2)                                chosen (LED drive)
Oximeter: venous saturation    SpO2 - U(15, 35) %, clipped 40-100           SvO2 ~60-80 % (phy-
                                                                            siology texts)
Oximeter: motion, wander       red/IR absorbance ratio U(0.7, 1.5) each;    motion reads ~85 %
                               wander U(0, 0.3) x k_ir, 0.05-0.3 Hz         (known failure)
Oximeter: noise                IR SD LU(1e-5, 3e-4) of the intensity; red   chosen
                               x U(1, 3)
Oximeter: units                gain LU(0.01, 100), no offset; {16, 18, 20,  delta-sigma AFEs
                               22} bits over U(1.2, 4) x the channel's max  (16-22 bits)
=============================  ===========================================  ==================

**Ectopy-rich records** (``ectopy="rich"``, ``liquid-stream data bidmc-sim --randomised
--ectopy rich``): every record gets frequent ectopic beats in one pattern (table above), for
training and scoring HR where a bedside monitor's count and a normal-beat count part: the HR
label is 60 / mean interval over ALL beats, ectopic ones included (what a monitor shows), so a
PVC bigeminy with full compensatory pauses reads the sinus rate, not half of it. After a
sinus beat an event of ``k`` ectopic beats (1, a couplet's 2, a run's 3-6) takes the
coupling ``c`` U(0.55, 0.8) x the sinus interval ``X``, then ``run_x`` x ``X`` each, then
the pause to the first sinus slot ``m X`` at least ``X / 2`` after the last ectopic beat
(one beat: ``m = 2``, the full compensatory pause ``(2 - c) X`` of the default records).
Bigeminy starts an event after every sinus beat inside its episodes (N V N V), trigeminy
after two (N N V); couplets and runs start one with their per-beat probability, and every
pattern adds isolated ones at ``ectopic_prob``. The rich draws come after every default
draw of the beats stream, so a rich record shares everything but its beat list (and what
follows from it) with the default record of the same ``(seed, index)``; the default
(``ectopy="default"``) draws are unchanged and a default set's stamp has no ``ectopy`` key.

**Waveforms.** ECG (param): each beat ``j`` is ``sum_w a_w exp(-(t - t_j - mu_w)^2 /
(2 s_w^2))`` over P, Q, R, S, T (seconds; beats j-1 .. j+2 are summed at every sample).
ECG (nk2): one NeuroKit2 beat (R at phase 0, 1 s period) placed in each R-R interval with a
piecewise-linear time map that keeps the first ``min(0.15 s, 0.3 IBI)`` after R and the last
``min(0.3 s, 0.35 IBI)`` before the next R at template speed (so the QRS and PR do not scale
with the rate) and stretches the rest. PPG (param): pulse ``j`` starts at ``t_j + PTT`` and
is a sum of 2-3 waves in phase ``(t - t_j - PTT) / IBI_j``; (nk2): the NeuroKit2 beat,
phase-warped. The volume pulse ``v`` (peak ~1) is multiplied per beat by the filling factor.
Irregular rhythms are thus real in both channels. In the nk2 family premature and AF beats
keep the template morphology (P waves included): a known limit of that family.

**SpO2 cue (invented, documented).** With the textbook ratio of ratios ``R = (110 - SpO2) /
25`` (0.4 at 100 %, 1.2 at 80 %), PLETH is modelled as an (inverted) red-light
photoplethysmogram through a Beer-Lambert nonlinearity: ``pulse = (1 - exp(-k v)) / (1 -
exp(-k))`` with ``k = 2 R``. The cue is the *curvature* of the pulse (at half volume the
pulse is at ``1 / (1 + exp(-k / 2))`` of its height: 0.60 at 100 %, 0.77 at 80 %), a shape
property that the per-record gain, offset and perfusion do not change. Honest caveat: real
pulse-oximeter PLETH is one auto-gained channel with AC/DC of a few %, so this curvature is
far larger than in real data; SpO2 learned from it checks the pipeline, not real oximetry.

**Oximeter channels** (IR, RED: what a transmission pulse oximeter measures before it
computes SpO2; the PLETH above is its display waveform). Beer-Lambert, with the arterial
pulsatile volume ``A = perfusion (1 + am r) v`` (``v`` the volume pulse, ``r`` the
respiration, as for PLETH), the venous respiratory volume ``V = bw r``, the slow wander
``W`` and the PLETH's motion artefact ``M``::

    ln I_ir  = -k_ir (A + V + W + M)
    ln I_red = ln DC_red - k_ir (R(SpO2) A + R(SvO2) V + r_w W + r_m M)
    R(s) = (110 - s) / 25          (the textbook linear calibration: R 0.4 at 100 %)

each then times ``1 + noise`` (white, per channel). So (AC/DC)_red / (AC/DC)_ir = R(SpO2)
for the arterial pulse: the ratio of ratios an oximeter reads, while venous pulsation,
wander and motion pull it towards their own ratios (motion towards ~1, i.e. ~85 %: the
classical oximeter's known failure). The channels are ratio-scale intensities: a gain and
quantisation but no offset (an offset would change DC, and with it what SpO2 is). A
sensor-off stretch of the ppg group holds them at their median ("flat": a frozen reading)
or NaN. Honest caveat: the calibration curve is the simulator's own; a real device's curve
differs (each maker fits its own), so a model trained here would need recalibration.

**Units.** Each channel is ``gain * clean + offset`` then quantised to the ADC step (so the
model must not depend on units). Sensor-off stretches are applied last: "flat" holds the
zero-input reading (exactly the channel's offset; 0.0 with ``scaling=False``), "nan" is NaN
(WFDB's missing value). Flat stretches sit at the offset rather than at 0.0 because a 0.0
stretch next to a small signal at offset 1000 would make WFDB's 16-bit auto-scaling step
larger than the signal.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .. import cache
from .bidmc_sim import FS, SIG_NAMES, SIG_UNITS, _smooth, _wander, record_name, write_record

SIM_REVISION = 2  # bump when the same arguments would give different records (2: IR, RED)
STAMP_NAME = ".vitals-sim-stamp.json"
PARAMS_NAME = "params.json"
FAMILIES = ("nk2", "param")
HR_WINDOW_S = 8.0
RR_WINDOW_S = 16.0
PAD_S = 20  # events and trajectories start PAD_S before 0 and end PAD_S after the record
REF_FS = 250  # NeuroKit2 template rate
OXI_NAMES = ("IR,", "RED,")  # the oximeter's raw intensity channels, after SIG_NAMES
REC_NAMES = SIG_NAMES + OXI_NAMES  # the columns of a record's signals
REC_UNITS = SIG_UNITS + ("NU", "NU")
IR, RED = len(SIG_NAMES), len(SIG_NAMES) + 1  # their columns
GROUPS = {"resp": (0,), "ppg": (1, IR, RED), "ecg": (2, 3, 4)}  # columns per sensor group
EVENT_KEYS = ("beats", "beat_kind", "breaths")  # per-event arrays (left out of params.json)
BEATS_SUFFIX = ".beats.npy"  # each record's R-peak times (s from its first sample), float64
STREAMS = (
    "traj",
    "breaths",
    "beats",
    "morph",
    "mod",
    "noise",
    "artefacts",
    "sensor",
    "scaling",
    "numerics",
    "oximeter",
)
NORMAL, ECTOPIC, AF = 0, 1, 2  # beat kinds


@dataclass
class VitalsSimReport:
    root: str
    records: int
    minutes: float
    seed: int
    families: tuple[str, ...]
    seconds: float  # generation time (NeuroKit2 import excluded)
    seconds_per_record: float
    family_counts: dict[str, int]
    hr_range: tuple[float, float]  # over all HR numerics
    rr_range: tuple[float, float]
    spo2_range: tuple[float, float]


# ---------------------------------------------------------------------------- draws


def _plain(v: Any) -> Any:
    """numpy scalars -> Python scalars (JSON-friendly); arrays and containers unchanged."""
    return v.item() if isinstance(v, np.generic) else v


class _Draws:
    """Records every draw in ``params``; ``force[name]`` replaces a draw's value (the draw is
    still made, so forcing one factor leaves the rest of the stream unchanged)."""

    def __init__(self, force: Mapping[str, Any] | None):
        self.params: dict[str, Any] = {}
        self.force = dict(force or {})
        self.used: set[str] = set()

    def __call__(self, name: str, value: Any) -> Any:
        if name in self.force:
            value = self.force[name]
            self.used.add(name)
        value = _plain(value)
        self.params[name] = value
        return value

    def check(self) -> None:
        unknown = set(self.force) - self.used
        if unknown:
            raise ValueError(f"force: unknown draw name(s) {sorted(unknown)}")


def _u(rng: np.random.Generator, lo: float, hi: float) -> float:
    return float(rng.uniform(lo, hi))


def _sign(rng: np.random.Generator, p_negative: float) -> float:
    return -1.0 if rng.random() < p_negative else 1.0


# ---------------------------------------------------------------------------- trajectories


def _changes(rng, secs, p_step, step, p_ramp, ramp) -> list[dict]:
    """Abrupt changes: at most one step (sigmoid over 1-10 s) and one ramp (30-180 s)."""
    out = []
    if rng.random() < p_step:
        at, size = _u(rng, 0.1, 0.9) * secs, _sign(rng, 0.5) * _u(rng, *step)
        out.append({"kind": "step", "at_s": at, "size": size, "dur_s": _u(rng, 1, 10)})
    if rng.random() < p_ramp:
        at, size = _u(rng, 0.0, 0.8) * secs, _sign(rng, 0.5) * _u(rng, *ramp)
        out.append({"kind": "ramp", "at_s": at, "size": size, "dur_s": _u(rng, 30, 180)})
    return out


def _apply_changes(tg: np.ndarray, changes: list[dict]) -> np.ndarray:
    """(S1,) sum of the changes on the 1 Hz grid ``tg``."""
    out = np.zeros(len(tg))
    for c in changes:
        x = (tg - c["at_s"]) / c["dur_s"]
        if c["kind"] == "step":
            out += c["size"] / (1 + np.exp(-8 * np.clip(x, -10, 10)))
        elif c["kind"] == "ramp":
            out += c["size"] * np.clip(x, 0, 1)
        else:  # dip: Gaussian of SD dur_s
            out += c["size"] * np.exp(-0.5 * ((tg - c["at_s"]) / c["dur_s"]) ** 2)
    return out


RR_BASE = ((8.0, 35.0),)  # spans of the base RR draw, breaths/min (module docstring)
RR_CLIP = (6.0, 40.0)  # the RR trajectory's range


def _u_spans(rng: np.random.Generator, spans: Sequence[tuple[float, float]]) -> float:
    """Uniform over the union of the disjoint ``spans`` (one draw; a single span is exactly
    :func:`_u`, so the default records are unchanged by the option)."""
    if len(spans) == 1:
        return _u(rng, *spans[0])
    x = _u(rng, 0.0, sum(hi - lo for lo, hi in spans))
    for lo, hi in spans:
        if x < hi - lo:
            return lo + x
        x -= hi - lo
    return spans[-1][1]


def check_rr_base(spans: Sequence[Sequence[float]]) -> tuple[tuple[float, float], ...]:
    """``spans`` as a tuple of (lo, hi) pairs, checked: non-empty, lo < hi, inside RR_CLIP,
    sorted and disjoint."""
    out = tuple((float(lo), float(hi)) for lo, hi in spans)
    if not out:
        raise ValueError("rr_base needs at least one span lo:hi")
    for (lo, hi), nxt in zip(out, out[1:] + ((np.inf, np.inf),), strict=True):
        if not (RR_CLIP[0] <= lo < hi <= RR_CLIP[1]) or hi > nxt[0]:
            raise ValueError(
                f"rr_base spans must be sorted, disjoint and inside {RR_CLIP[0]:g}-"
                f"{RR_CLIP[1]:g} breaths/min with lo < hi, got {out}"
            )
    return out


def _trajectories(
    rng, d: _Draws, secs: int, rr_base: Sequence[tuple[float, float]] = RR_BASE
) -> tuple[np.ndarray, ...]:
    """1 Hz grid ``tg`` (S1,) from -PAD_S to secs + PAD_S and HR, RR, SpO2 on it; the base
    RR drawn uniformly over the ``rr_base`` spans."""
    tg = np.arange(-PAD_S, secs + PAD_S + 1, dtype=np.float64)
    n = len(tg)
    hr = d("hr0", _u(rng, 45, 170)) + d("hr_sd", _u(rng, 1, 8)) * _smooth(
        rng, n, d("hr_tau_s", _u(rng, 20, 90))
    )
    hr += _apply_changes(tg, d("hr_changes", _changes(rng, secs, 0.5, (10, 40), 0.3, (10, 50))))
    rr = d("rr0", _u_spans(rng, rr_base)) + d("rr_sd", _u(rng, 0.5, 3)) * _smooth(
        rng, n, d("rr_tau_s", _u(rng, 20, 90))
    )
    rr += _apply_changes(tg, d("rr_changes", _changes(rng, secs, 0.3, (3, 12), 0.2, (3, 12))))
    sp = d("spo2_0", _u(rng, 86, 100)) + d("spo2_sd", _u(rng, 0.2, 1.5)) * _smooth(
        rng, n, d("spo2_tau_s", _u(rng, 20, 90))
    )
    sp_changes = []
    if rng.random() < 0.4:
        at, size = _u(rng, 0.1, 0.9) * secs, -_u(rng, 3, 12)
        sp_changes.append({"kind": "dip", "at_s": at, "size": size, "dur_s": _u(rng, 15, 60)})
    if rng.random() < 0.2:
        at, size = _u(rng, 0.1, 0.9) * secs, _sign(rng, 0.5) * _u(rng, 2, 6)
        sp_changes.append({"kind": "step", "at_s": at, "size": size, "dur_s": _u(rng, 1, 10)})
    sp += _apply_changes(tg, d("spo2_changes", sp_changes))
    return tg, np.clip(hr, 40, 180), np.clip(rr, *RR_CLIP), np.clip(sp, 80, 100)


# ---------------------------------------------------------------------------- events


def rate(events: np.ndarray, q: np.ndarray, window: float) -> np.ndarray:
    """``60 / mean`` of the intervals of ``events`` (s, sorted) whose midpoints lie in
    ``[q - window/2, q + window/2)``; the nearest interval when none does. q (n,) -> (n,)."""
    d = np.diff(events)
    m = events[:-1] + d / 2
    cs = np.concatenate([[0.0], np.cumsum(d)])
    lo = np.searchsorted(m, q - window / 2, side="left")
    hi = np.searchsorted(m, q + window / 2, side="left")
    cnt = hi - lo
    mean = (cs[hi] - cs[lo]) / np.maximum(cnt, 1)
    near = np.clip(np.searchsorted(m, q), 1, len(m) - 1)
    near -= (q - m[near - 1]) < (m[near] - q)
    return 60.0 / np.where(cnt > 0, mean, d[near])


def _breaths(rng, d: _Draws, tg: np.ndarray, rr1: np.ndarray) -> np.ndarray:
    """Breath onset times (s): intervals 60 / RR(t) x lognormal(CV)."""
    cv = d("breath_cv", _u(rng, 0.02, 0.2))
    t, out = tg[0] + _u(rng, 0, 1), []
    while t < tg[-1]:
        out.append(t)
        t += 60 / np.interp(t, tg, rr1) * np.exp(cv * rng.standard_normal() - cv**2 / 2)
    return np.asarray(out + [t])


ECTOPY = ("default", "rich")  # the ectopy option (module docstring: "Ectopy-rich records")
# ``force`` draws of a record with no artefact of its own (no ectopic beat, AF, motion,
# sensor-off or low perfusion): what a test adds to it is all that is wrong with it
NO_ARTEFACTS = {
    "ectopic_prob": 0.0,
    "af_episodes": [],
    "motion_bursts": [],
    "sensor_off": [],
    "perfusion": 1.0,
}
ECTOPY_PATTERNS = ("isolated", "bigeminy", "trigeminy", "couplets", "runs")


def _beat_draws(rng, d: _Draws, secs: int, ectopy: str = "default") -> dict:
    rich = ectopy == "rich"
    keep = (lambda name, v: v) if rich else d  # rich: its own ectopic draws, recorded below
    ect = _u(rng, 0.005, 0.1) if rng.random() < 0.3 else 0.0
    af = []
    if rng.random() < 0.15:
        dur = _u(rng, 30, 240)
        start = _u(rng, -0.2 * dur, max(1.0, secs - 0.5 * dur))
        af = [[start, start + dur]]
    out = {
        "lf_amp": d("hrv_lf_amp", _u(rng, 0, 0.05)),
        "lf_hz": d("hrv_lf_hz", _u(rng, 0.04, 0.15)),
        "lf_phase": d("hrv_lf_phase", _u(rng, 0, 2 * np.pi)),
        "rsa": d("hrv_rsa", _u(rng, 0.005, 0.05)),
        "white": d("hrv_white", _u(rng, 0.005, 0.03)),
        "ect_p": keep("ectopic_prob", ect),
        "ect_kind": keep("ectopic_kind", ["pac", "pvc"][int(rng.integers(2))]),
        "af": d("af_episodes", af),
        "af_cv": d("af_cv", _u(rng, 0.1, 0.25)),
        "ptt": d("ptt_s", _u(rng, 0.15, 0.35)),
        "fill": d("pulse_fill_exp", _u(rng, 0.5, 1.5)),
    }
    if not rich:
        return out
    # ectopy-rich records: drawn after every default draw of this stream, so a rich record
    # shares its AF, HRV and pulse draws with the default record of the same (seed, index)
    pattern = ECTOPY_PATTERNS[int(rng.choice(5, p=[0.3, 0.25, 0.15, 0.15, 0.15]))]
    burden = _u(rng, 0.1, 0.4)
    episodes = [[-float(PAD_S), float(secs + PAD_S)]]  # the whole record
    if pattern in ("bigeminy", "trigeminy") and rng.random() >= 0.4:
        episodes = []
        for _ in range(int(rng.integers(1, 4))):
            dur = _u(rng, 20, 120)
            start = _u(rng, -0.2 * dur, max(1.0, secs - 0.5 * dur))
            episodes.append([start, start + dur])
    out.update(
        ect_p=d(
            "ectopic_prob", burden / (1 - burden) if pattern == "isolated" else _u(rng, 0.0, 0.1)
        ),
        ect_kind=d("ectopic_kind", "pvc" if rng.random() < 0.85 else "pac"),
        pattern=d("ectopy_pattern", pattern),
        episodes=d("ectopy_episodes", episodes),
        event_p=d(
            "ectopy_event_prob",
            _u(rng, 0.05, 0.2)
            if pattern == "couplets"
            else _u(rng, 0.02, 0.08)
            if pattern == "runs"
            else 0.0,
        ),
        run_x=d("ectopy_run_ibi_x", _u(rng, 0.5, 0.8)),
    )
    return out


def _ectopic_event(rng, p: dict, t: float, since: int) -> int:
    """Ectopic beats to start after a normal beat (0: none), for an ectopy-rich record;
    ``since``: normal beats since the last ectopic one."""
    on = any(a <= t < b for a, b in p["episodes"])
    pat = p["pattern"]
    if on and pat == "bigeminy":
        return 1
    if on and pat == "trigeminy":
        return int(since >= 2)
    if pat in ("couplets", "runs") and rng.random() < p["event_p"]:
        return 2 if pat == "couplets" else int(rng.integers(3, 7))
    return int(rng.random() < p["ect_p"])


def _ectopic_intervals(rng, p: dict, k: int, base: float) -> list[tuple[float, int]]:
    """(interval, kind) of ``k`` ectopic beats and the sinus beat after them: the first at
    coupling U(0.55, 0.8) x ``base`` (the sinus interval), the others ``run_x`` x ``base``
    (couplets, runs), then the pause to the first sinus slot at least half an interval after
    the last ectopic beat (one beat: the full compensatory pause (2 - c) x ``base``)."""
    out = [float(np.clip(_u(rng, 0.55, 0.8) * base, 0.2, 3.0))]
    out += [float(np.clip(p["run_x"] * base, 0.2, 3.0)) for _ in range(k - 1)]
    s = sum(out)
    slots = np.ceil(s / base + 0.5)
    return [(x, ECTOPIC) for x in out] + [(slots * base - s, NORMAL)]


def _beats(rng, p: dict, tg, hr1, breaths) -> tuple[np.ndarray, np.ndarray]:
    """R-peak times (s) and beat kinds from the IBI process (module docstring). The RSA
    follows ``r(t) = -cos(2 pi breath phase) / 2`` (the same in both families)."""
    nb = np.arange(len(breaths), dtype=np.float64)

    def resp_at(x: float) -> float:
        return -0.5 * np.cos(2 * np.pi * np.interp(x, breaths, nb))

    t = tg[0] + _u(rng, 0, 1)
    times, kinds, pending = [t], [NORMAL], None
    queue: list[tuple[float, int]] = []  # ectopy-rich: the (interval, kind) still to come
    af = p["af"]
    while t < tg[-1]:
        nominal = 60 / np.interp(t, tg, hr1)
        if any(a <= t < b for a, b in af):
            cv = p["af_cv"]
            ibi, kind = nominal * np.exp(cv * rng.standard_normal() - cv**2 / 2), AF
            queue.clear()
        else:
            mod = (
                1
                + p["lf_amp"] * np.sin(2 * np.pi * p["lf_hz"] * t + p["lf_phase"])
                - p["rsa"] * resp_at(t)
                + p["white"] * rng.standard_normal()
            )
            ibi, kind = nominal * mod, NORMAL
            if "pattern" in p:  # ectopy-rich (the default records never take this branch)
                if queue:
                    ibi, kind = queue.pop(0)
                elif kinds[-1] == NORMAL:
                    since = next(
                        (j for j, x in enumerate(reversed(kinds)) if x != NORMAL), len(kinds)
                    )
                    k = _ectopic_event(rng, p, t, since)
                    if k:
                        queue = _ectopic_intervals(rng, p, k, nominal * mod)
                        ibi, kind = queue.pop(0)
            elif pending is not None:
                ibi, pending = pending, None
            elif kinds[-1] == NORMAL and rng.random() < p["ect_p"]:
                c = _u(rng, 0.55, 0.8)
                ibi, pending, kind = c * nominal * mod, (2 - c) * nominal * mod, ECTOPIC
        t += float(np.clip(ibi, 0.2, 3.0))
        times.append(t)
        kinds.append(kind)
    return np.asarray(times), np.asarray(kinds, np.int8)


def _interval(events: np.ndarray, t: np.ndarray) -> np.ndarray:
    """(T,) index k of the interval [e_k, e_(k+1)) holding each time (clipped)."""
    return np.clip(np.searchsorted(events, t, side="right") - 1, 0, len(events) - 2)


# ---------------------------------------------------------------------------- templates


def _cycle_template(x: np.ndarray, marks: np.ndarray, npts: int) -> np.ndarray:
    """Mean cycle of ``x`` between consecutive ``marks`` (samples), resampled to npts points
    (phase 0 .. 1, endpoint excluded), with the end-to-start step removed linearly."""
    cycles = []
    for a, b in zip(marks[:-1], marks[1:], strict=True):
        seg = x[a : b + 1]
        cycles.append(np.interp(np.linspace(0, len(seg) - 1, npts + 1), np.arange(len(seg)), seg))
    c = np.mean(cycles, axis=0)
    c -= np.linspace(0, c[-1] - c[0], npts + 1)
    return c[:npts]


def _peaks(x: np.ndarray, fs: int) -> np.ndarray:
    """Sample indices of the main peak of each cycle of a ~60 bpm template signal."""
    from scipy.signal import find_peaks

    idx, _ = find_peaks(x, distance=int(0.6 * fs))  # the highest point of each ~1 s cycle
    mid = np.median(x)
    keep = x[idx] > mid + 0.5 * (np.median(x[idx]) - mid)
    return idx[keep]


def _nk2_ecg(rng, d: _Draws) -> np.ndarray:
    """(REF_FS,) one NeuroKit2 ECG beat, R at index 0, R = 1."""
    import neurokit2 as nk

    method = d("nk2_ecg_method", ["simple", "ecgsyn"][int(rng.integers(2))])
    ti = np.array([-70, -15, 0, 15, 100]) + rng.uniform(-10, 10, 5)
    ai = np.array([1.2, -5, 30, -7.5, 0.75]) * [_u(rng, 0.5, 1.5), 1, 1, 1, _u(rng, -0.5, 1.5)]
    bi = np.array([0.25, 0.1, 0.1, 0.1, 0.4]) * [1, *([_u(rng, 0.7, 1.5)] * 3), 1]
    seed = int(rng.integers(2**31))
    kw = {}
    if method == "ecgsyn":
        kw = {
            "ti": tuple(d("nk2_ecgsyn_ti", ti.tolist())),
            "ai": tuple(d("nk2_ecgsyn_ai", ai.tolist())),
            "bi": tuple(d("nk2_ecgsyn_bi", bi.tolist())),
        }
    x = nk.ecg_simulate(
        duration=8,
        sampling_rate=REF_FS,
        heart_rate=60,
        heart_rate_std=0,
        noise=0,
        method=method,
        random_state=seed,
        **kw,
    )
    x = np.asarray(x, np.float64)
    x -= np.median(x)
    tpl = _cycle_template(x, _peaks(x, REF_FS)[1:-1], REF_FS)
    return tpl / (tpl[0] + 1e-12)


def _nk2_ppg(rng) -> np.ndarray:
    """(REF_FS,) one NeuroKit2 PPG beat from foot to foot, 0 .. 1."""
    import neurokit2 as nk

    x = nk.ppg_simulate(
        duration=10,
        sampling_rate=REF_FS,
        heart_rate=60,
        frequency_modulation=0,
        ibi_randomness=0,
        drift=0,
        motion_amplitude=0,
        powerline_amplitude=0,
        burst_number=0,
        random_state=int(rng.integers(2**31)),
    )
    x = np.asarray(x, np.float64)
    tpl = _cycle_template(x, _peaks(-x, REF_FS)[1:-1], REF_FS)
    tpl -= tpl.min()
    return tpl / (tpl.max() + 1e-12)


def _nk2_breath(rng) -> np.ndarray:
    """(200,) one NeuroKit2 breath from trough to trough, 0 .. 1."""
    import neurokit2 as nk

    fs = 50
    x = nk.rsp_simulate(
        duration=90,
        sampling_rate=fs,
        respiratory_rate=15,
        noise=0,
        method="breathmetrics",
        random_state=int(rng.integers(2**31)),
    )
    x = np.asarray(x, np.float64)
    _, info = nk.rsp_peaks(nk.rsp_clean(x, sampling_rate=fs), sampling_rate=fs)
    tr = np.asarray(info["RSP_Troughs"])
    tpl = _cycle_template(x, tr[1:-1], 200)
    tpl -= tpl.min()
    return tpl / (tpl.max() + 1e-12)


def _periodic(tpl: np.ndarray, phase: np.ndarray) -> np.ndarray:
    """Sample the one-cycle template ``tpl`` (npts,) at ``phase`` (cycles, any real)."""
    n = len(tpl)
    return np.interp(np.mod(phase, 1.0) * n, np.arange(n + 1), np.append(tpl, tpl[0]))


# ---------------------------------------------------------------------------- morphology


def _param_ecg_draws(rng, d: _Draws) -> dict:
    return {
        "p_amp": d("ecg_p_amp", _u(rng, 0.05, 0.25)),
        "pr_s": d("ecg_pr_s", _u(rng, 0.12, 0.22)),
        "p_width_s": d("ecg_p_width_s", _u(rng, 0.02, 0.05)),
        "q_amp": d("ecg_q_amp", -_u(rng, 0, 0.3)),
        "qrs_s": d("ecg_qrs_s", _u(rng, 0.06, 0.12)),
        "s_amp": d("ecg_s_amp", -_u(rng, 0, 0.6)),
        "t_amp": d("ecg_t_amp", _u(rng, -0.4, 0.6)),
        "t_peak_s": d("ecg_t_peak_s", _u(rng, 0.22, 0.34)),
        "t_width_s": d("ecg_t_width_s", _u(rng, 0.04, 0.08)),
        "pvc_qrs": d("ecg_pvc_qrs_x", _u(rng, 1.8, 2.5)),
        "pvc_r": d("ecg_pvc_r_x", _u(rng, 0.8, 1.6)),
        "pvc_t": d("ecg_pvc_t_x", _u(rng, 1, 2)),
    }


def _param_ecg_waves(e: dict, beats, kinds, pvc: bool) -> tuple[np.ndarray, ...]:
    """Per-beat amplitudes, centres (s from R) and widths (s): each (nb, 5) for P Q R S T."""
    nb = len(beats)
    prev = np.concatenate([[np.diff(beats)[0]], np.diff(beats)])  # (nb,) preceding RR
    q = np.sqrt(np.clip(prev, 0.2, 3.0))  # Bazett
    qrs = np.full(nb, e["qrs_s"])
    amp = np.tile([e["p_amp"], e["q_amp"], 1.0, e["s_amp"], e["t_amp"]], (nb, 1))
    if pvc:
        ect = kinds == ECTOPIC
        qrs[ect] *= e["pvc_qrs"]
        amp[ect, 0] = 0
        amp[ect, 2] *= e["pvc_r"]
        amp[ect, 4] = -np.sign(e["pvc_r"]) * max(abs(e["t_amp"]), 0.15) * e["pvc_t"]
    amp[kinds == AF, 0] = 0
    mu = np.stack(
        [np.full(nb, -e["pr_s"]), -0.35 * qrs, np.zeros(nb), 0.35 * qrs, e["t_peak_s"] * q], axis=1
    )
    sd = np.stack(
        [np.full(nb, e["p_width_s"]), qrs / 8, qrs / 6, qrs / 8, e["t_width_s"] * q], axis=1
    )
    return amp, mu, sd


def _sum_waves(t, events, k, amp, mu, sd, offsets, shape="gauss", phase_ibi=None):
    """(T,) sum over beats k + offsets of their waves. Gaussian in seconds from the event, or
    (``phase_ibi`` given) in phase ``(t - e_j) / phase_ibi[j]``, Gaussian or log-normal."""
    out = np.zeros(len(t))
    for o in offsets:
        j = np.clip(k + o, 0, len(events) - 1)
        x = t - events[j]  # (T,)
        if phase_ibi is not None:
            x = x / phase_ibi[j]
        for w in range(amp.shape[1]):
            a, m, s = amp[j, w], mu[j, w], sd[j, w]
            if shape == "lognormal":
                z = np.log(np.maximum(x, 1e-6) / m) / (s / m)
                out += np.where(x > 0, a * np.exp(-0.5 * z * z), 0.0)
            else:
                out += a * np.exp(-0.5 * ((x - m) / s) ** 2)
    return out


def _param_ppg_draws(rng, d: _Draws) -> dict:
    sys_mu = d("ppg_sys_mu", _u(rng, 0.10, 0.25))
    refl_mu = sys_mu + d("ppg_refl_delay", _u(rng, 0.15, 0.35))
    late = _u(rng, 0, 0.4) if rng.random() < 0.5 else 0.0
    return {
        "shape": d("ppg_shape", ["gauss", "lognormal"][int(rng.integers(2))]),
        "amp": [1.0, d("ppg_refl_ratio", _u(rng, 0, 0.95)), d("ppg_late_ratio", late)],
        "mu": [sys_mu, refl_mu, refl_mu + d("ppg_late_delay", _u(rng, 0.1, 0.25))],
        "sd": [
            d("ppg_sys_sigma", _u(rng, 0.03, 0.10)),
            d("ppg_refl_sigma", _u(rng, 0.04, 0.12)),
            d("ppg_late_sigma", _u(rng, 0.05, 0.15)),
        ],
    }


def _param_ppg_peak(p: dict) -> float:
    """Peak of one isolated parametric pulse (to normalise it to 1)."""
    x = np.linspace(-0.5, 2.5, 3001)
    one = np.zeros(1, np.int64)
    g = _sum_waves(
        x,
        np.zeros(1),
        one,
        np.array([p["amp"]]),
        np.array([p["mu"]]),
        np.array([p["sd"]]),
        (0,),
        p["shape"],
        np.ones(1),
    )
    return float(g.max())


def _nk2_ecg_warp(t, beats, k, tpl) -> np.ndarray:
    """(T,) the nk2 ECG beat placed in each R-R interval (QRS / PR kept at template speed)."""
    tau = t - beats[k]
    ibi = beats[k + 1] - beats[k]
    head = np.minimum(0.15, 0.3 * ibi)
    tail = np.minimum(0.3, 0.35 * ibi)
    mid = head + (tau - head) * (1 - head - tail) / (ibi - head - tail)
    u = np.where(tau < head, tau, np.where(tau > ibi - tail, 1 - (ibi - tau), mid))
    return _periodic(tpl, u)


# ---------------------------------------------------------------------------- noise


def _motion(rng, d: _Draws, secs: int, fs: int, n: int) -> dict[str, np.ndarray]:
    """Per group (T,) motion-artefact signals from the (drawn or forced) burst list."""
    from scipy.ndimage import gaussian_filter1d

    rate_min = d("motion_per_min", _u(rng, 0, 2))
    bursts = []
    for _ in range(int(rng.poisson(rate_min * secs / 60))):
        dur = _u(rng, 1, 10)
        s = int(rng.integers(0, max(1, n - int(dur * fs))))
        bursts.append(
            {
                "kind": "motion",
                "start_s": s / fs,
                "dur_s": int(dur * fs) / fs,
                "amp": _u(rng, 0.5, 3),
                "smooth_s": _u(rng, 0.02, 0.2),
                "groups": [
                    g for g, p in (("ppg", 0.9), ("ecg", 0.5), ("resp", 0.7)) if rng.random() < p
                ],
            }
        )
    out = {g: np.zeros(n) for g in GROUPS}
    for b in d("motion_bursts", bursts):
        s = int(round(b["start_s"] * fs))
        length = min(int(round(b["dur_s"] * fs)), n - s)
        for g in b["groups"]:
            z = gaussian_filter1d(rng.standard_normal(length), b["smooth_s"] * fs)
            out[g][s : s + length] += b["amp"] * np.hanning(length) * z / (z.std() + 1e-12)
    return out


def _sensor_off(rng, d: _Draws, secs: int, fs: int, n: int) -> list[dict]:
    """Sensor-off stretches: per group p=0.15, 1-2 stretches of U(2, 30) s, flat or NaN."""
    stretches = []
    for g in GROUPS:
        if rng.random() >= 0.15:
            continue
        for _ in range(int(rng.integers(1, 3))):
            length = int(min(_u(rng, 2, 30), 0.25 * secs) * fs)
            s = int(rng.integers(0, max(1, n - length)))
            mode = ["flat", "nan"][int(rng.integers(2))]
            stretches.append(
                {
                    "kind": "sensor_off",
                    "group": g,
                    "start_s": s / fs,
                    "dur_s": length / fs,
                    "mode": mode,
                }
            )
    return d("sensor_off", stretches)


def sensor_off_masks(stretches: list[dict], n: int, fs: int) -> dict[str, np.ndarray]:
    """Per group (T,) bool: True inside the group's sensor-off stretches."""
    masks = {g: np.zeros(n, bool) for g in GROUPS}
    for s in stretches:
        a = int(round(s["start_s"] * fs))
        masks[s["group"]][a : a + int(round(s["dur_s"] * fs))] = True
    return masks


def _scaling_draws(rng, d: _Draws) -> dict:
    c = len(SIG_NAMES)
    return {
        "gain": d("gain", (10.0 ** rng.uniform(-2, 2, c)).tolist()),
        "offset": d("offset", rng.uniform(-1000, 1000, c).tolist()),
        "adc_bits": d("adc_bits", rng.choice([10, 12, 14, 16], c).tolist()),
        "adc_headroom": d("adc_headroom", rng.uniform(1.2, 4, c).tolist()),
    }


def adc_steps(clean: np.ndarray, sc: Mapping[str, Sequence[float]]) -> np.ndarray:
    """(C,) ADC step per channel: adc_headroom x span of ``gain * clean`` / 2^adc_bits.

    clean (T, C) before units; ``sc``: the record's params (or its scaling draws)."""
    g = np.asarray(sc["gain"])
    span = np.nanmax(clean, axis=0) - np.nanmin(clean, axis=0)
    full = np.asarray(sc["adc_headroom"]) * g * np.maximum(span, 1e-9)
    return full / 2.0 ** np.asarray(sc["adc_bits"])


# ---------------------------------------------------------------------------- record


def simulate_randomised(
    rng: np.random.Generator,
    minutes: float,
    fs: int = FS,
    family: str | None = None,
    *,
    scaling: bool = True,
    force: Mapping[str, Any] | None = None,
    rr_base: Sequence[tuple[float, float]] = RR_BASE,
    ectopy: str = "default",
) -> dict:
    """One domain-randomised record (module docstring).

    Returns :func:`.bidmc_sim.simulate_record`'s structure: ``signals`` (T, 7) in REC_NAMES
    order (SIG_NAMES then OXI_NAMES), ``sig_names`` / ``sig_units``, ``numerics`` (S, 4) in
    NUM_NAMES order (integers, NaN gaps), ``truth`` {"hr", "rr", "spo2"} (T,) plus
    ``"sensor_off"`` {"ppg", "ecg", "resp"} (T,) bool, and ``params``: every draw by name,
    plus the event arrays ``beats`` (R times, s),
    ``beat_kind`` (0 normal, 1 premature, 2 AF) and ``breaths`` (onset times, s).
    T = minutes*60*fs + 1, S = minutes*60 + 1. ``family``: "nk2", "param" or None (drawn).
    ``scaling=False`` skips gain, offset and quantisation (same draws). ``force``: draw name ->
    value to use instead of the draw (e.g. ``{"ectopic_prob": 0.1}``). ``rr_base``: the spans
    of the base RR draw (default U(8, 35); e.g. ``((6, 9), (34, 37))`` for records at the
    ends of the range; :func:`check_rr_base`). ``ectopy``: "default" or "rich" (frequent
    ectopic beats in patterns: module docstring, "Ectopy-rich records").
    """
    if ectopy not in ECTOPY:
        raise ValueError(f"ectopy must be one of {ECTOPY}, got {ectopy!r}")
    secs = int(round(minutes * 60))
    if secs < 1:
        raise ValueError(f"minutes must give at least 1 s, got {minutes}")
    n = secs * fs + 1
    t = np.arange(n) / fs  # (T,)
    drawn = FAMILIES[int(rng.integers(len(FAMILIES)))]
    family = drawn if family is None else family
    if family not in FAMILIES:
        raise ValueError(f"family must be one of {FAMILIES}, got {family!r}")
    seeds = rng.integers(2**63, size=len(STREAMS))  # a longer STREAMS keeps the first seeds
    rs = dict(zip(STREAMS, (np.random.default_rng(s) for s in seeds), strict=True))
    d = _Draws(force)
    d("family", family)

    tg, hr1, rr1, sp1 = _trajectories(rs["traj"], d, secs, check_rr_base(rr_base))
    breaths = _breaths(rs["breaths"], d, tg, rr1)
    depth = np.exp(
        d("breath_depth_cv", _u(rs["breaths"], 0.05, 0.3))
        * rs["breaths"].standard_normal(len(breaths))
    )
    bp = _beat_draws(rs["beats"], d, secs, ectopy)
    beats, kinds = _beats(rs["beats"], bp, tg, hr1, breaths)

    resp_shape = _resp_shape(rs["morph"], d, family)
    kb = _interval(breaths, t)
    r_wave = depth[kb] * _periodic(resp_shape, (t - breaths[kb]) / np.diff(breaths)[kb])
    r_c = r_wave - float(np.mean(resp_shape))  # (T,) respiration, ~[-0.5, 0.5]
    ecg, vol = _cardiac(rs["morph"], d, family, t, beats, kinds, tg, hr1, bp)
    ptt = bp["ptt"]
    sig, motion = _channels(rs, d, t, fs, secs, ecg, vol, r_c, beats, kinds, bp, sp1, tg)
    sp = np.interp(t, tg, sp1)
    oxi = _oximeter(rs["oximeter"], d, n, fs, vol, r_c, sp, motion["ppg"])  # (T, 2)
    stretches = _sensor_off(rs["sensor"], d, secs, fs, n)
    masks = sensor_off_masks(stretches, n, fs)
    sc = _scaling_draws(rs["scaling"], d)
    if scaling:
        step = adc_steps(sig, sc)
        sig = np.asarray(sc["gain"]) * sig + np.asarray(sc["offset"])
        sig = np.round(sig / step) * step
        oxi = oxi * np.asarray(d.params["oxi_gain"])
        step = (
            np.asarray(d.params["oxi_headroom"])
            * oxi.max(0)
            / 2.0 ** np.asarray(d.params["oxi_adc_bits"])
        )
        oxi = np.round(oxi / step) * step
    sig = np.concatenate([sig, oxi], axis=1)  # (T, 7) in REC_NAMES order
    held = np.median(oxi, axis=0)  # a frozen oximeter reading: the channel's level
    for s in stretches:
        one = sensor_off_masks([s], n, fs)[s["group"]]
        for c in GROUPS[s["group"]]:
            if c >= IR:
                flat = held[c - IR]
            else:
                flat = sc["offset"][c] if scaling else 0.0
            sig[one, c] = flat if s["mode"] == "flat" else np.nan

    hr = rate(beats, t, HR_WINDOW_S)
    rr = rate(breaths, t, RR_WINDOW_S)
    numerics = _numerics(rs["numerics"], d, secs, fs, beats, ptt, breaths, sp, masks["ppg"])
    d.check()
    params = dict(d.params)
    params.update(beats=beats, beat_kind=kinds, breaths=breaths)
    return {
        "signals": sig,
        "sig_names": REC_NAMES,
        "sig_units": REC_UNITS,
        "numerics": numerics,
        "truth": {"hr": hr, "rr": rr, "spo2": sp, "sensor_off": masks},
        "params": params,
    }


def _resp_shape(rng, d: _Draws, family: str) -> np.ndarray:
    """(npts,) one breath from onset to onset, 0 at both ends, peak 1."""
    if family == "nk2":
        return _nk2_breath(rng)
    fi = d("breath_insp_frac", _u(rng, 0.3, 0.5))
    fe = d("breath_exp_frac", _u(rng, 0.5, 1.0)) * (1 - fi)
    ph = np.arange(200) / 200
    insp = 0.5 - 0.5 * np.cos(np.pi * ph / fi)
    exp_ = 0.5 + 0.5 * np.cos(np.pi * np.clip((ph - fi) / fe, 0, 1))
    return np.where(ph < fi, insp, exp_)


def _cardiac(rng, d: _Draws, family, t, beats, kinds, tg, hr1, bp: dict):
    """Clean ECG core (T,) (R ~ 1 mV) and PPG volume pulse (T,) (peak ~1)."""
    ptt, fill = bp["ptt"], bp["fill"]
    ibi = np.diff(beats)  # (nb-1,)
    nominal = 60 / np.interp(beats, tg, hr1)
    prev = np.concatenate([[ibi[0]], ibi])
    pamp = np.clip(prev / nominal, 0.3, 1.3) ** fill  # (nb,) per-pulse amplitude
    k = _interval(beats, t)
    pulses = beats + ptt
    kp = _interval(pulses, t)
    period = np.append(ibi, ibi[-1])  # (nb,) the interval after each beat
    if family == "param":
        e = _param_ecg_draws(rng, d)
        amp, mu, sd = _param_ecg_waves(e, beats, kinds, d.params["ectopic_kind"] == "pvc")
        ecg = _sum_waves(t, beats, k, amp, mu, sd, (-1, 0, 1, 2))
        p = _param_ppg_draws(rng, d)
        a = np.outer(pamp, p["amp"]) / _param_ppg_peak(p)
        mu_p, sd_p = np.tile(p["mu"], (len(beats), 1)), np.tile(p["sd"], (len(beats), 1))
        vol = _sum_waves(t, pulses, kp, a, mu_p, sd_p, (-2, -1, 0, 1), p["shape"], period)
    else:
        ecg = _nk2_ecg_warp(t, beats, k, _nk2_ecg(rng, d))
        ppg_t = _nk2_ppg(rng)
        vol = pamp[kp] * _periodic(ppg_t, (t - pulses[kp]) / period[kp])
    return ecg, vol


def _channels(rs, d: _Draws, t, fs, secs, ecg, vol, r_c, beats, kinds, bp, sp1, tg):
    """Clean-plus-noise signals (T, 5) in SIG_NAMES order, before units and sensor-off."""
    n = len(t)
    rm, rn = rs["mod"], rs["noise"]
    # PLETH: Beer-Lambert SpO2 cue, perfusion, respiratory AM and BW
    kappa = 2 * (110 - np.interp(t, tg, sp1)) / 25
    pulse = (1 - np.exp(-kappa * vol)) / (1 - np.exp(-kappa))
    perf = d("perfusion", _u(rm, 0.05, 0.3) if rm.random() < 0.2 else 1.0)
    am_p, bw_p = d("ppg_am", _u(rm, 0.05, 0.3)), d("ppg_bw", _u(rm, 0.05, 0.4))
    am_e, bw_e = d("ecg_am", _u(rm, 0.02, 0.2)), d("ecg_bw_mv", _u(rm, 0, 0.15))
    cardio = d("resp_cardiogenic", _u(rm, 0, 0.1))
    motion = _motion(rs["artefacts"], d, secs, fs, n)
    line_hz = d("powerline_hz", [50, 60][int(rn.integers(2))])
    line = d("powerline_mv", _u(rn, 0, 0.1)) * np.sin(2 * np.pi * line_hz * t + _u(rn, 0, 6.3))
    pleth = (
        perf * ((1 + am_p * r_c) * pulse + bw_p * r_c)
        + d("ppg_wander", _u(rn, 0, 0.3)) * _wander(rn, n, fs)
        + d("ppg_noise", _u(rn, 0.002, 0.03)) * rn.standard_normal(n)
        + 0.1 * line
        + motion["ppg"]
    )
    # ECG: core with respiratory AM/BW, AF f-waves, leads with their own noise
    core = ecg * (1 + am_e * r_c) + bw_e * r_c + _fwaves(rn, d, t, beats, kinds, bp)
    emg_sd = d("emg_mv", _u(rn, 0, 0.05))
    emg_env = 1 + d("emg_motion_x", _u(rn, 2, 10)) * (np.abs(motion["ecg"]) > 0)
    wander_e, noise_e = d("ecg_wander_mv", _u(rn, 0, 0.3)), d("ecg_noise_mv", _u(rn, 0.005, 0.05))
    s_ii = d("lead_ii", _sign(rn, 0.1) * _u(rn, 0.5, 1.5))
    s_avr = d("lead_avr", -_sign(rn, 0.1) * _u(rn, 0.3, 0.8) * abs(s_ii))
    s_v = d("lead_v", _sign(rn, 0.2) * _u(rn, 0.3, 1.5))
    v_delay = int(round(d("lead_v_delay_s", _u(rn, 0, 0.02)) * fs))

    def lead(name: str, scale: float, delay: int) -> np.ndarray:
        line_x = d(f"powerline_x_{name}", _u(rn, 0, 1))
        emg = np.diff(rn.standard_normal(n + 1)) / np.sqrt(2)
        return (
            scale * np.roll(core, delay)
            + wander_e * _wander(rn, n, fs)
            + noise_e * rn.standard_normal(n)
            + emg_sd * emg_env * emg
            + line_x * line
            + motion["ecg"]
        )

    resp = (
        d("resp_amp", _u(rn, 0.3, 1)) * r_c
        + cardio * vol
        + d("resp_wander", _u(rn, 0, 0.2)) * _wander(rn, n, fs)
        + d("resp_noise", _u(rn, 0.002, 0.02)) * rn.standard_normal(n)
        + motion["resp"]
    )
    leads = [lead("v", s_v, v_delay), lead("avr", s_avr, 0), lead("ii", s_ii, 0)]
    return np.stack([resp, pleth, *leads], axis=1), motion


def ratio_of_ratios(spo2):
    """R = (110 - SpO2) / 25: the textbook linear oximeter calibration (R 0.4 at 100 %)."""
    return (110.0 - np.asarray(spo2, np.float64)) / 25.0


def _oximeter(rng, d: _Draws, n, fs, vol, r_c, sp, motion_ppg) -> np.ndarray:
    """Raw IR and red intensities (T, 2) of a transmission oximeter, DC_ir = 1 (module
    docstring, "Oximeter channels"): Beer-Lambert, ln I = ln DC - k A for each absorber."""
    p = d.params
    pi_ir = d("oxi_pi_ir", float(10.0 ** rng.uniform(np.log10(0.003), np.log10(0.05))))
    dc_red = d("oxi_dc_red", float(10.0 ** rng.uniform(-0.5, 0.5)))
    sv_drop = d("oxi_venous_drop", _u(rng, 15, 35))
    r_m = d("oxi_motion_ratio", _u(rng, 0.7, 1.5))
    r_w = d("oxi_wander_ratio", _u(rng, 0.7, 1.5))
    w_amp = d("oxi_wander", _u(rng, 0, 0.3))
    sd_ir = d("oxi_noise_ir", float(10.0 ** rng.uniform(-5, np.log10(3e-4))))
    sd_red = d("oxi_noise_red", sd_ir * _u(rng, 1, 3))
    d("oxi_gain", (10.0 ** rng.uniform(-2, 2, 2)).tolist())
    d("oxi_adc_bits", rng.choice([16, 18, 20, 22], 2).tolist())
    d("oxi_headroom", rng.uniform(1.2, 4, 2).tolist())
    arterial = p["perfusion"] * (1 + p["ppg_am"] * r_c) * vol  # (T,) pulsatile volume
    venous = p["ppg_bw"] * r_c  # (T,) respiratory (venous) volume
    wander = w_amp * _wander(rng, n, fs)
    r_a = ratio_of_ratios(sp)  # (T,) arterial
    r_v = ratio_of_ratios(np.clip(sp - sv_drop, 40, 100))  # (T,) venous
    ln_ir = -pi_ir * (arterial + venous + wander + motion_ppg)
    ln_red = -pi_ir * (r_a * arterial + r_v * venous + r_w * wander + r_m * motion_ppg)
    ir = np.exp(ln_ir) * (1 + sd_ir * rng.standard_normal(n))
    red = dc_red * np.exp(ln_red) * (1 + sd_red * rng.standard_normal(n))
    return np.stack([ir, red], axis=1)


def _fwaves(rng, d: _Draws, t, beats, kinds, bp) -> np.ndarray:
    """(T,) AF fibrillatory waves during the AF episodes (0 elsewhere)."""
    hz, amp = d("af_f_hz", _u(rng, 4, 9)), d("af_f_mv", _u(rng, 0.02, 0.1))
    out = np.zeros(len(t))
    for a, b in bp["af"]:
        on = (t >= a) & (t < b)
        ph = 2 * np.pi * hz * t[on] + 0.5 * np.sin(2 * np.pi * 0.3 * t[on])
        out[on] = amp * np.sin(ph)
    return out


def _numerics(rng, d: _Draws, secs, fs, beats, ptt, breaths, sp, ppg_off) -> np.ndarray:
    """(S, 4) HR, PULSE, RESP, SpO2 (module docstring)."""
    q = np.arange(secs + 1) + 0.5
    hr_n = np.round(rate(beats, q, HR_WINDOW_S))
    pulse_n = np.round(rate(beats + ptt, q, HR_WINDOW_S))
    rr_n = np.round(rate(breaths, q, RR_WINDOW_S))
    m = np.concatenate([sp[: secs * fs].reshape(secs, fs).mean(axis=1), sp[-1:]])
    sp_n = np.minimum(np.round(m), 100)
    off = np.concatenate([ppg_off[: secs * fs].reshape(secs, fs).any(axis=1), ppg_off[-1:]])
    gap = None
    if rng.random() < 0.2:
        length = int(rng.integers(5, 21))
        s = int(rng.integers(0, max(1, secs + 1 - length)))
        gap = [s, s + length]
    gap = d("probe_dropout_s", gap)  # [first, end) seconds or None
    if gap is not None:
        off[gap[0] : gap[1]] = True
    sp_n[off] = np.nan
    pulse_n[off] = np.nan
    return np.stack([hr_n, pulse_n, rr_n, sp_n], axis=1)


# ---------------------------------------------------------------------------- writing


def json_params(params: Mapping[str, Any]) -> dict:
    """``params`` without the per-event arrays (EVENT_KEYS), plus their counts."""
    out = {k: v for k, v in params.items() if k not in EVENT_KEYS}
    out["n_beats"] = int(len(params["beats"]))
    out["n_ectopic"] = int((params["beat_kind"] == ECTOPIC).sum())
    out["n_breaths"] = int(len(params["breaths"]))
    return out


def record_family(i: int, families: Sequence[str]) -> str:
    """The family of record ``i``: families[i % len(families)]."""
    return families[i % len(families)]


def _make_one(args: tuple[str, int, int, float, str, tuple, str]) -> dict:
    out, seed, i, minutes, family, rr_base, ectopy = args
    rng = np.random.default_rng([seed, i])
    rec = simulate_randomised(rng, minutes, family=family, rr_base=rr_base, ectopy=ectopy)
    write_record(out, record_name(i), rec)
    np.save(Path(out) / f"{record_name(i)}{BEATS_SUFFIX}", rec["params"]["beats"])
    num = rec["numerics"]
    ranges = [[float(np.nanmin(num[:, c])), float(np.nanmax(num[:, c]))] for c in (0, 2, 3)]
    return {"params": json_params(rec["params"]), "ranges": ranges}


def _stamp(
    records: int,
    minutes: float,
    seed: int,
    families: Sequence[str],
    rr_base=RR_BASE,
    ectopy: str = "default",
) -> dict:
    """What a set was generated with (``rr_base`` and ``ectopy`` only when they are not the
    default, so the stamps of the sets made before the options still match)."""
    stamp = {
        "simulator": "vitals_sim",
        "revision": SIM_REVISION,
        "records": records,
        "minutes": float(minutes),
        "seed": seed,
        "families": list(families),
    }
    if tuple(rr_base) != RR_BASE:
        stamp["rr_base"] = [list(sp) for sp in rr_base]
    if ectopy != "default":
        stamp["ectopy"] = ectopy
    return stamp


MAX_RECORDS = 9999  # bidmc01 … bidmc9999 (the loaders take any bidmc + digits)


def write_vitals_sim(
    out: str | os.PathLike,
    records: int = 24,
    minutes: float = 8,
    seed: int = 0,
    families: Sequence[str] = FAMILIES,
    workers: int = 1,
    progress: bool = True,
    overwrite: bool = False,
    rr_base: Sequence[tuple[float, float]] = RR_BASE,
    ectopy: str = "default",
) -> VitalsSimReport:
    """Generate ``records`` randomised record pairs into ``out`` (module docstring), with
    ``params.json``. Atomic like :func:`.bidmc_sim.write_bidmc_sim`: ``out`` is complete or
    absent; an existing non-empty ``out`` is replaced only with ``overwrite`` and only if it
    is a previous randomised set (has the stamp file). ``rr_base``: the spans of the base RR
    draw; ``ectopy``: "default" or "rich" (:func:`simulate_randomised`)."""
    if records < 1 or records > MAX_RECORDS:
        raise ValueError(f"records must be in 1..{MAX_RECORDS} (bidmcN+ names), got {records}")
    if minutes * 60 < 1:
        raise ValueError(f"minutes must be positive, got {minutes}")
    families = tuple(families)
    if not families or any(f not in FAMILIES for f in families):
        raise ValueError(f"families must be a non-empty subset of {FAMILIES}, got {families}")
    rr_base = check_rr_base(rr_base)
    if ectopy not in ECTOPY:
        raise ValueError(f"ectopy must be one of {ECTOPY}, got {ectopy!r}")
    out = Path(out).expanduser().resolve()
    cache.check_replaceable(out, STAMP_NAME, overwrite, "a randomised vital-sign set")
    with cache.atomic_dir(out) as tmp:
        import neurokit2  # noqa: F401  (imported before the clock starts; ~4 s)

        t0 = time.perf_counter()
        jobs = [
            (str(tmp), seed, i, float(minutes), record_family(i, families), rr_base, ectopy)
            for i in range(records)
        ]
        bar = dict(total=records, desc="vitals-sim", unit="record") if progress else None
        results = cache.map_jobs(_make_one, jobs, workers, bar)
        seconds = time.perf_counter() - t0
        names = [record_name(i) for i in range(records)]
        (tmp / "RECORDS").write_text("".join(f"{n}\n{n}n\n" for n in names))
        per_record = {n: r["params"] for n, r in zip(names, results, strict=True)}
        stamp = _stamp(records, minutes, seed, families, rr_base, ectopy)
        doc = {**stamp, "per_record": per_record}
        (tmp / PARAMS_NAME).write_text(json.dumps(doc, indent=1))
        rg = np.asarray([r["ranges"] for r in results])  # (records, 3, 2)
        fam = [record_family(i, families) for i in range(records)]
        report = VitalsSimReport(
            root=str(out),
            records=records,
            minutes=float(minutes),
            seed=seed,
            families=families,
            seconds=seconds,
            seconds_per_record=seconds / records,
            family_counts={f: fam.count(f) for f in families},
            hr_range=(float(rg[:, 0, 0].min()), float(rg[:, 0, 1].max())),
            rr_range=(float(rg[:, 1, 0].min()), float(rg[:, 1, 1].max())),
            spo2_range=(float(rg[:, 2, 0].min()), float(rg[:, 2, 1].max())),
        )
        cache.write_stamp(tmp, STAMP_NAME, stamp, report)
    return report


def default_vitals_root(
    records: int = 24, minutes: float = 8, seed: int = 0, families: Sequence[str] = FAMILIES
) -> Path:
    """``$LIQUID_STREAM_CACHE/vitals-sim-r{records}-m{minutes}-s{seed}-{families}``."""
    return cache.cache_dir() / f"vitals-sim-r{records}-m{minutes:g}-s{seed}-{'+'.join(families)}"


def ensure_vitals_sim(
    records: int = 24,
    minutes: float = 8,
    seed: int = 0,
    families: Sequence[str] = FAMILIES,
    root: str | os.PathLike | None = None,
    workers: int = 1,
    progress: bool = True,
) -> Path:
    """The cached randomised set for these arguments, generated (atomically, under a file
    lock) if missing or made by another simulator revision."""
    families = tuple(families)
    root = (
        Path(root).expanduser()
        if root is not None
        else default_vitals_root(records, minutes, seed, families)
    )
    want = _stamp(records, minutes, seed, families)
    return cache.ensure_built(
        root,
        lambda: cache.matching_stamp(root, STAMP_NAME, want) is not None,
        lambda: write_vitals_sim(
            root, records, minutes, seed, families, workers, progress, overwrite=True
        ),
    )
