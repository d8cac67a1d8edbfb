"""The domain-randomised vital-sign simulator: every randomised factor against its definition,
determinism per (seed, index), and the WFDB round trip."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy.signal import find_peaks

from liquid_stream.training.data.vitals import vitals_sim as vs
from liquid_stream.training.data.vitals.bidmc import list_records, read_record

FS = 125
MINUTES = 1.0
SECS = 60
N = SECS * FS + 1
QUIET = {  # no noise, no artefacts: the clean waveforms
    "motion_per_min": 0.0,
    "motion_bursts": [],
    "sensor_off": [],
    "ppg_noise": 0.0,
    "ppg_wander": 0.0,
    "powerline_mv": 0.0,
    "ecg_noise_mv": 0.0,
    "ecg_wander_mv": 0.0,
    "emg_mv": 0.0,
    "resp_noise": 0.0,
    "resp_wander": 0.0,
    "resp_cardiogenic": 0.0,
}


def sim(seed: int, index: int = 0, family: str | None = None, **kw) -> dict:
    return vs.simulate_randomised(
        np.random.default_rng([seed, index]), MINUTES, family=family, **kw
    )


def naive_rate(events: np.ndarray, q: float, window: float) -> float:
    """60 / mean of the intervals whose midpoints lie in [q - w/2, q + w/2) (a plain loop)."""
    sel = [
        b - a
        for a, b in zip(events[:-1], events[1:], strict=True)
        if q - window / 2 <= (a + b) / 2 < q + window / 2
    ]
    assert sel, "the label window holds no interval"
    return 60.0 / float(np.mean(sel))


# ---------------------------------------------------------------------------- structure


@pytest.mark.parametrize("family", vs.FAMILIES)
def test_record_structure(family: str) -> None:
    rec = sim(1, family=family)
    assert rec["signals"].shape == (N, 7) and rec["numerics"].shape == (SECS + 1, 4)
    assert rec["sig_names"] == vs.SIG_NAMES + ("IR,", "RED,") == vs.REC_NAMES
    num = rec["numerics"]
    ok = np.isfinite(num)
    assert ok[:, 0].all() and ok[:, 2].all()  # HR and RESP are always the truth
    assert np.array_equal(num[ok], np.round(num[ok]))  # integers (WFDB gain 1 keeps them)
    truth = rec["truth"]
    for k in ("hr", "rr", "spo2"):
        assert truth[k].shape == (N,) and np.isfinite(truth[k]).all()
    assert set(truth["sensor_off"]) == {"ppg", "ecg", "resp"}
    for m in truth["sensor_off"].values():
        assert m.shape == (N,) and m.dtype == bool
    assert rec["params"]["family"] == family
    json.dumps(vs.json_params(rec["params"]))  # every draw is JSON-serialisable


def test_rate_definition() -> None:
    ev = np.arange(0.0, 30.0, 0.5)  # 120 / min
    np.testing.assert_allclose(vs.rate(ev, np.array([5.0, 10.3, 20.0]), 8.0), 120.0)
    ev = np.array([0.0, 1.0, 3.0, 4.0])  # midpoints 0.5, 2, 3.5; intervals 1, 2, 1
    assert vs.rate(ev, np.array([2.0]), 1.0)[0] == pytest.approx(30.0)  # only the 2 s one
    assert vs.rate(ev, np.array([2.0]), 4.0)[0] == pytest.approx(60 / (4 / 3))
    assert vs.rate(ev, np.array([0.6]), 0.1)[0] == pytest.approx(60.0)  # nearest (empty)


# ---------------------------------------------------------------------------- labels


@pytest.mark.parametrize("seed", [2, 3])
def test_hr_and_pulse_labels_are_60_over_mean_ibi(seed: int) -> None:
    rec = sim(seed, force={"ectopic_prob": 0.08, "af_episodes": [[20.0, 45.0]]})
    p, num = rec["params"], rec["numerics"]
    beats = p["beats"]
    assert (p["beat_kind"] == vs.ECTOPIC).any() and (p["beat_kind"] == vs.AF).any()
    for k in range(SECS + 1):
        want = naive_rate(beats, k + 0.5, vs.HR_WINDOW_S)
        assert num[k, 0] == round(want)
        if np.isfinite(num[k, 1]):
            assert num[k, 1] == round(naive_rate(beats + p["ptt_s"], k + 0.5, vs.HR_WINDOW_S))
    for i in range(0, N, 997):  # truth["hr"] at fs: the same rate at every sample time
        assert rec["truth"]["hr"][i] == pytest.approx(naive_rate(beats, i / FS, 8.0), rel=1e-12)
    # the per-second truth and the numeric agree (the numeric is the rate at the middle)
    per_sec = rec["truth"]["hr"][: SECS * FS].reshape(SECS, FS).mean(axis=1)
    assert np.abs(per_sec - num[:SECS, 0]).mean() < 1.5


@pytest.mark.parametrize("family", vs.FAMILIES)
def test_beats_are_the_r_peaks_of_the_clean_ecg(family: str) -> None:
    force = {**QUIET, "ectopic_prob": 0.06, "ectopic_kind": "pac", "af_episodes": []}
    rec = sim(4, family=family, scaling=False, force=force)
    p = rec["params"]
    ii = rec["signals"][:, 4] * np.sign(p["lead_ii"])
    peaks, _ = find_peaks(ii, height=0.6 * ii.max(), distance=int(0.15 * FS))
    peaks = peaks[(peaks > 0.1 * FS) & (peaks < (SECS - 0.1) * FS)]
    beats = p["beats"][(p["beats"] > 0.1) & (p["beats"] < SECS - 0.1)]
    assert len(peaks) == len(beats)
    assert np.abs(peaks / FS - beats).max() <= 1.5 / FS


@pytest.mark.parametrize("family", vs.FAMILIES)
def test_pulses_follow_the_beats_after_the_transit_time(family: str) -> None:
    """Clean PLETH: param family, one systolic peak per beat at t_j + PTT + mu IBI_j; nk2
    family, the pulse foot (template minimum) at t_j + PTT."""
    force = {
        **QUIET,
        "ppg_am": 0.0,
        "ppg_bw": 0.0,
        "perfusion": 1.0,
        "af_episodes": [],
        "ectopic_prob": 0.05,
    }
    if family == "param":
        force.update(ppg_refl_ratio=0.0, ppg_late_ratio=0.0, ppg_shape="gauss")
    rec = sim(21, family=family, scaling=False, force=force)
    p = rec["params"]
    beats, pleth = p["beats"], rec["signals"][:, 1]
    ibi = np.diff(beats)
    if family == "param":
        want = beats[:-1] + p["ptt_s"] + p["ppg_sys_mu"] * ibi
        found, _ = find_peaks(pleth, prominence=0.2 * np.ptp(pleth))
    else:
        want = beats[:-1] + p["ptt_s"]
        found, _ = find_peaks(-pleth, prominence=0.2 * np.ptp(pleth))
    want = want[(want > 1) & (want < SECS - 1)]
    found = found[(found > FS) & (found < (SECS - 1) * FS)] / FS
    assert len(found) == len(want)
    assert np.abs(found - want).max() <= 2.5 / FS


@pytest.mark.parametrize("family", vs.FAMILIES)
def test_breathing_rate_is_in_the_pleth(family: str) -> None:
    """Respiratory baseline/amplitude modulation: the beat-averaged PLETH oscillates at RR."""
    force = {
        **QUIET,
        "rr0": 18.0,
        "rr_sd": 0.0,
        "rr_changes": [],
        "breath_cv": 0.02,
        "ppg_am": 0.2,
        "ppg_bw": 0.2,
        "hr0": 75.0,
        "hr_changes": [],
    }
    rec = vs.simulate_randomised(np.random.default_rng([22, 0]), 2.0, family=family, force=force)
    x = rec["signals"][:, 1]
    x = np.convolve(x - x.mean(), np.ones(FS) / FS, mode="same")  # 1 s mean: the pulses go
    f = np.fft.rfftfreq(len(x), 1 / FS)
    spec = np.abs(np.fft.rfft(x * np.hanning(len(x))))
    band = (f > 0.05) & (f < 1.0)
    peak_per_min = 60 * f[band][np.argmax(spec[band])]
    assert peak_per_min == pytest.approx(np.mean(rec["numerics"][:, 2]), abs=1.5)


@pytest.mark.parametrize("family", vs.FAMILIES)
def test_rr_labels_and_breaths(family: str) -> None:
    rec = sim(5, family=family, scaling=False, force={**QUIET, "breath_depth_cv": 0.02})
    p, num = rec["params"], rec["numerics"]
    breaths = p["breaths"]
    for k in range(SECS + 1):
        assert num[k, 2] == round(naive_rate(breaths, k + 0.5, vs.RR_WINDOW_S))
    assert rec["truth"]["rr"][N // 2] == pytest.approx(naive_rate(breaths, (N // 2) / FS, 16.0))
    # one breath of the RESP signal per generated breath: onsets at troughs, one peak between
    resp = rec["signals"][:, 0]
    peaks, _ = find_peaks(resp, prominence=0.3 * np.ptp(resp))
    inside = [(a, b) for a, b in zip(breaths[:-1], breaths[1:], strict=True) if a > 0 and b < SECS]
    assert inside
    for a, b in inside:
        assert ((peaks / FS > a) & (peaks / FS < b)).sum() == 1
        lo = resp[int(a * FS) : int(math.ceil(b * FS))].min()
        assert resp[int(round(a * FS))] - lo <= 0.02 * np.ptp(resp)


def test_spo2_labels_in_range_and_per_second_truth() -> None:
    for i in range(6):
        rec = sim(6, i)
        sp, num = rec["truth"]["spo2"], rec["numerics"][:, 3]
        assert sp.min() >= 80 and sp.max() <= 100
        ok = np.isfinite(num)
        assert ok.any()
        per_sec = np.append(sp[: SECS * FS].reshape(SECS, FS).mean(axis=1), sp[-1])
        np.testing.assert_array_equal(num[ok], np.minimum(np.round(per_sec), 100)[ok])


def _unit_free(x: np.ndarray) -> np.ndarray:
    return (x - x.mean()) / x.std()


def test_spo2_cue_is_pulse_shape_not_amplitude() -> None:
    """Same record at SpO2 100 % and 80 %: the z-scored PLETH differs (more time above mid
    level at 80 %: the Beer-Lambert curvature); a different gain and offset do not change it."""
    base = {**QUIET, "spo2_sd": 0.0, "spo2_changes": [], "adc_bits": [16] * 5}
    hi = sim(7, force={**base, "spo2_0": 100.0})["signals"][:, 1]
    lo = sim(7, force={**base, "spo2_0": 80.0})["signals"][:, 1]
    other = {**base, "spo2_0": 100.0, "gain": [0.013] * 5, "offset": [-870.0] * 5}
    hi2 = sim(7, force=other)["signals"][:, 1]
    np.testing.assert_allclose(_unit_free(hi), _unit_free(hi2), atol=2e-3)

    def above_mid(x: np.ndarray) -> float:
        return float((x > (x.min() + x.max()) / 2).mean())

    assert above_mid(lo) > above_mid(hi) + 0.05


# ---------------------------------------------------------------------------- units


@pytest.mark.parametrize("family", vs.FAMILIES)
def test_gain_offset_and_quantisation_exactly_applied(family: str) -> None:
    force = {"sensor_off": []}
    x = sim(8, family=family, scaling=False, force=force)
    y = sim(8, family=family, scaling=True, force=force)
    sc = y["params"]
    g, o = np.asarray(sc["gain"]), np.asarray(sc["offset"])
    assert ((g >= 0.01) & (g <= 100)).all() and (np.abs(o) <= 1000).all()
    assert set(sc["adc_bits"]) <= {10, 12, 14, 16}
    xs, ys = x["signals"][:, : vs.IR], y["signals"][:, : vs.IR]  # the monitor's channels
    step = vs.adc_steps(xs, sc)  # (5,)
    err = ys - (g * xs + o)
    assert (np.abs(err) <= step / 2 * (1 + 1e-9) + 1e-9 * np.abs(o)).all()
    k = ys / step
    np.testing.assert_allclose(k, np.round(k), atol=1e-6 * np.abs(k).max())
    # steps are what the ADC draw says: headroom x span / 2^bits
    span = g * np.ptp(xs, axis=0)
    bits = np.asarray(sc["adc_bits"])
    np.testing.assert_allclose(step, np.asarray(sc["adc_headroom"]) * span / 2.0**bits)
    np.testing.assert_array_equal(x["numerics"], y["numerics"])  # labels do not change


def test_gains_span_four_decades() -> None:
    gains = np.concatenate([sim(9, i)["params"]["gain"] for i in range(20)])
    assert gains.min() < 0.05 and gains.max() > 20
    assert ((gains >= 0.01) & (gains <= 100)).all()


# ---------------------------------------------------------------------------- oximeter

OXI_QUIET = {**QUIET, "oxi_noise_ir": 0.0, "oxi_noise_red": 0.0, "oxi_wander": 0.0, "ppg_bw": 0.0}


@pytest.mark.parametrize("family", vs.FAMILIES)
def test_oximeter_ratio_of_ratios_is_the_spo2_calibration(family: str) -> None:
    """Clean arterial pulses only: ln(I_red / DC_red) / ln(I_ir) = R(SpO2) at every sample,
    and R = (110 - SpO2) / 25 (the module docstring's Beer-Lambert model)."""
    rec = sim(30, family=family, scaling=False, force=OXI_QUIET)
    ir, red = rec["signals"][:, vs.IR], rec["signals"][:, vs.RED]
    p, sp = rec["params"], rec["truth"]["spo2"]
    li, lr = np.log(ir), np.log(red / p["oxi_dc_red"])
    big = li < -0.2 * p["oxi_pi_ir"] * p["perfusion"]  # inside the pulses
    assert big.mean() > 0.1
    np.testing.assert_allclose(lr[big] / li[big], (110 - sp[big]) / 25, rtol=1e-9)
    np.testing.assert_allclose(vs.ratio_of_ratios([100, 85]), [0.4, 1.0])
    # the pulse depth is the perfusion index: max ln(DC / I_ir) = k_ir x max arterial volume
    assert 0.5 * p["oxi_pi_ir"] * p["perfusion"] < -li.min() < 2 * p["oxi_pi_ir"] * p["perfusion"]


def test_oximeter_gain_and_quantisation_exactly_applied() -> None:
    force = {"sensor_off": []}
    x = sim(31, scaling=False, force=force)["signals"][:, vs.IR :]
    y_rec = sim(31, scaling=True, force=force)
    y, p = y_rec["signals"][:, vs.IR :], y_rec["params"]
    g = np.asarray(p["oxi_gain"])
    assert ((g >= 0.01) & (g <= 100)).all() and set(p["oxi_adc_bits"]) <= {16, 18, 20, 22}
    step = np.asarray(p["oxi_headroom"]) * (g * x).max(0) / 2.0 ** np.asarray(p["oxi_adc_bits"])
    assert (np.abs(y - g * x) <= step / 2 * (1 + 1e-9)).all()  # a gain, no offset
    k = y / step
    np.testing.assert_allclose(k, np.round(k), atol=1e-6 * np.abs(k).max())
    assert (y > 0).all()  # intensities: ratio-scale, positive


def test_oximeter_draws_in_range_and_apart_from_the_other_channels() -> None:
    for i in range(6):
        p = sim(32, i)["params"]
        assert 0.003 <= p["oxi_pi_ir"] <= 0.05 and 10**-0.5 <= p["oxi_dc_red"] <= 10**0.5
        assert 15 <= p["oxi_venous_drop"] <= 35 and 0 <= p["oxi_wander"] <= 0.3
        assert 0.7 <= p["oxi_motion_ratio"] <= 1.5 and 0.7 <= p["oxi_wander_ratio"] <= 1.5
        assert 1e-5 <= p["oxi_noise_ir"] <= 3e-4
        assert p["oxi_noise_ir"] <= p["oxi_noise_red"] <= 3 * p["oxi_noise_ir"]
    # the oximeter draws from its own stream: forcing one leaves the other channels alone
    a, b = sim(33), sim(33, force={"oxi_pi_ir": 0.04, "oxi_noise_ir": 0.0})
    np.testing.assert_array_equal(a["signals"][:, : vs.IR], b["signals"][:, : vs.IR])
    assert not np.allclose(a["signals"][:, vs.IR], b["signals"][:, vs.IR])


def test_ratio_baseline_reads_the_calibration_on_clean_records() -> None:
    """The classical ratio of ratios (training/data/vitals/bidmc_baseline.py) recovers SpO2 on clean
    pulses within 0.5 %, and motion with its own ratio pulls it off (the known failure)."""
    from liquid_stream.training.data.vitals.bidmc_baseline import ratio_spo2

    quiet = {**OXI_QUIET, "spo2_changes": []}
    for i in range(3):
        rec = sim(34, i, force=quiet)
        ir, red = rec["signals"][:, vs.IR], rec["signals"][:, vs.RED]
        sp = rec["truth"]["spo2"]
        for a in range(0, N - 4000, 2000):
            est = ratio_spo2(ir[a : a + 4000], red[a : a + 4000], FS)
            assert abs(est - min(sp[a : a + 4000].mean(), 100.0)) < 0.5, (i, a, est)
    bursts = [
        {
            "kind": "motion",
            "start_s": 5.0,
            "dur_s": 40.0,
            "amp": 3.0,
            "smooth_s": 0.05,
            "groups": ["ppg"],
        }
    ]
    rec = sim(34, 0, force={**quiet, "motion_bursts": bursts, "oxi_motion_ratio": 1.0})
    ir, red, sp = rec["signals"][:, vs.IR], rec["signals"][:, vs.RED], rec["truth"]["spo2"]
    assert ratio_spo2(ir[625:4625], red[625:4625], FS) < sp[625:4625].mean() - 3


# ---------------------------------------------------------------------------- artefacts


def test_sensor_off_stretches_are_marked_and_flat_or_nan() -> None:
    stretches = [
        {"kind": "sensor_off", "group": "ppg", "start_s": 10.0, "dur_s": 5.0, "mode": "flat"},
        {"kind": "sensor_off", "group": "ecg", "start_s": 30.0, "dur_s": 4.0, "mode": "nan"},
        {"kind": "sensor_off", "group": "resp", "start_s": 40.0, "dur_s": 2.5, "mode": "flat"},
    ]
    for scaling in (False, True):
        rec = sim(10, scaling=scaling, force={"sensor_off": stretches, "probe_dropout_s": None})
        sig, masks, off = rec["signals"], rec["truth"]["sensor_off"], rec["params"]["offset"]
        for s in stretches:
            m = masks[s["group"]]
            a = int(s["start_s"] * FS)
            assert np.flatnonzero(m).tolist() == list(range(a, a + int(s["dur_s"] * FS)))
            for c in vs.GROUPS[s["group"]]:
                inside = sig[m, c]
                if s["mode"] == "nan":
                    assert np.isnan(inside).all()
                elif c >= vs.IR:  # an oximeter intensity holds a frozen reading, its level
                    level = np.median(sig[~m, c])
                    assert (inside == inside[0]).all() and abs(inside[0] / level - 1) < 0.05
                else:
                    assert (inside == (off[c] if scaling else 0.0)).all()
                out = sig[~m, c]
                assert (
                    np.isfinite(out).all() and np.ptp(out) > 0 and (np.diff(out) != 0).mean() > 0.5
                )
        # PULSE and SpO2 are NaN exactly for the seconds the PLETH stretch touches
        num = rec["numerics"]
        assert np.flatnonzero(np.isnan(num[:, 3])).tolist() == list(range(10, 15))
        assert np.array_equal(np.isnan(num[:, 1]), np.isnan(num[:, 3]))


def test_drawn_sensor_off_matches_params() -> None:
    seen = 0
    for i in range(12):
        rec = sim(11, i)
        st = rec["params"]["sensor_off"]
        masks = rec["truth"]["sensor_off"]
        for g in vs.GROUPS:
            want = sum(s["dur_s"] for s in st if s["group"] == g)
            assert masks[g].sum() <= round(want * FS) and (masks[g].sum() > 0) == (want > 0)
        seen += len(st)
        for s in st:
            assert 2 * FS <= round(s["dur_s"] * FS) <= 30 * FS and s["mode"] in ("flat", "nan")
    assert seen > 0


def test_ectopic_beats_when_forced() -> None:
    rec = sim(12, force={"ectopic_prob": 0.15, "ectopic_kind": "pvc", "af_episodes": []})
    kinds, beats = rec["params"]["beat_kind"], rec["params"]["beats"]
    ibi = np.diff(beats)
    ect = np.flatnonzero(kinds == vs.ECTOPIC)
    assert len(ect) >= 5
    ect = ect[(ect >= 2) & (ect < len(beats) - 1)]
    ect = ect[(kinds[ect - 1] == vs.NORMAL) & (kinds[ect - 2] == vs.NORMAL)]  # after normals
    assert len(ect) >= 3
    pre, post, before = ibi[ect - 1], ibi[ect], ibi[ect - 2]
    # coupling c in [0.55, 0.8] of the IBI X, then a full compensatory pause (2 - c) X:
    # pre / (pre + post) = c / 2 exactly
    frac = pre / (pre + post)
    assert ((frac >= 0.275 - 1e-12) & (frac <= 0.4 + 1e-12)).all()
    assert (np.abs((pre + post) / (2 * before) - 1) < 0.2).all()  # X = the usual IBI (+-HRV)
    none = sim(12, force={"ectopic_prob": 0.0, "af_episodes": []})["params"]["beat_kind"]
    assert (none == vs.NORMAL).all()


def test_af_episode_is_irregular() -> None:
    force = {"af_episodes": [[10.0, 50.0]], "af_cv": 0.2, "ectopic_prob": 0.0, "hrv_white": 0.005}
    p = sim(13, force=force)["params"]
    beats, kinds = p["beats"], p["beat_kind"]
    ibi = np.diff(beats)
    inside = (beats[:-1] >= 10.5) & (beats[:-1] < 49)
    assert (kinds[1:][inside] == vs.AF).all()
    outside = (kinds[1:] == vs.NORMAL) & ~inside
    rel = np.abs(np.diff(ibi)) / ibi[1:]  # successive-difference irregularity
    assert np.median(rel[inside[1:]]) > 2 * np.median(rel[outside[1:]])


def test_motion_bursts_follow_their_list() -> None:
    burst = {
        "kind": "motion",
        "start_s": 20.0,
        "dur_s": 4.0,
        "amp": 2.0,
        "smooth_s": 0.05,
        "groups": ["ppg"],
    }
    clean = sim(14, scaling=False, force={**QUIET})["signals"]
    moved = sim(14, scaling=False, force={**QUIET, "motion_bursts": [burst]})["signals"]
    diff = moved - clean
    a, b = 20 * FS, 24 * FS
    assert np.abs(diff[:, [0, 2, 3, 4]]).max() == 0  # other groups untouched
    assert np.abs(diff[:a, 1]).max() == 0 and np.abs(diff[b + 1 :, 1]).max() == 0
    assert np.std(diff[a:b, 1]) > 0.3


# ---------------------------------------------------------------------------- morphology

COMMON = {
    "hr0": (45, 170),
    "hr_sd": (1, 8),
    "rr0": (8, 35),
    "rr_sd": (0.5, 3),
    "spo2_0": (86, 100),
    "spo2_sd": (0.2, 1.5),
    "breath_cv": (0.02, 0.2),
    "breath_depth_cv": (0.05, 0.3),
    "hrv_lf_amp": (0, 0.05),
    "hrv_lf_hz": (0.04, 0.15),
    "hrv_rsa": (0.005, 0.05),
    "hrv_white": (0.005, 0.03),
    "ectopic_prob": (0, 0.1),
    "af_cv": (0.1, 0.25),
    "ptt_s": (0.15, 0.35),
    "pulse_fill_exp": (0.5, 1.5),
    "perfusion": (0.05, 1.0),
    "ppg_am": (0.05, 0.3),
    "ppg_bw": (0.05, 0.4),
    "ecg_am": (0.02, 0.2),
    "ecg_bw_mv": (0, 0.15),
    "ppg_wander": (0, 0.3),
    "ppg_noise": (0.002, 0.03),
    "ecg_wander_mv": (0, 0.3),
    "ecg_noise_mv": (0.005, 0.05),
    "powerline_mv": (0, 0.1),
    "emg_mv": (0, 0.05),
    "resp_noise": (0.002, 0.02),
    "resp_wander": (0, 0.2),
    "motion_per_min": (0, 2),
    "af_f_hz": (4, 9),
    "af_f_mv": (0.02, 0.1),
    "lead_v_delay_s": (0, 0.02),
}
PARAM = {
    "ecg_p_amp": (0.05, 0.25),
    "ecg_pr_s": (0.12, 0.22),
    "ecg_qrs_s": (0.06, 0.12),
    "ecg_q_amp": (-0.3, 0),
    "ecg_s_amp": (-0.6, 0),
    "ecg_t_amp": (-0.4, 0.6),
    "ecg_t_peak_s": (0.22, 0.34),
    "ecg_t_width_s": (0.04, 0.08),
    "ecg_pvc_qrs_x": (1.8, 2.5),
    "ppg_sys_mu": (0.10, 0.25),
    "ppg_sys_sigma": (0.03, 0.10),
    "ppg_refl_ratio": (0, 0.95),
    "ppg_refl_delay": (0.15, 0.35),
    "ppg_refl_sigma": (0.04, 0.12),
    "ppg_late_ratio": (0, 0.4),
    "ppg_late_delay": (0.1, 0.25),
    "breath_insp_frac": (0.3, 0.5),
}


@pytest.mark.parametrize("family", vs.FAMILIES)
def test_draws_within_documented_ranges(family: str) -> None:
    ranges = {**COMMON, **(PARAM if family == "param" else {})}
    seen: dict[str, list] = {k: [] for k in ranges}
    for i in range(8):
        p = sim(15, i, family=family)["params"]
        for k, (lo, hi) in ranges.items():
            assert lo <= p[k] <= hi, (k, p[k])
            seen[k].append(p[k])
        assert abs(p["lead_ii"]) >= 0.5 and abs(p["lead_ii"]) <= 1.5
        if family == "param":
            assert p["ppg_shape"] in ("gauss", "lognormal")
        else:
            assert p["nk2_ecg_method"] in ("simple", "ecgsyn") and "ppg_sys_mu" not in p
        hr = sim(15, i, family=family)["truth"]["hr"]
        assert 25 < hr.min() and hr.max() < 260  # labels from real IBIs (HRV, pauses, AF)
    assert len(set(seen["hr0"])) == 8  # really drawn


def test_wide_physiology_over_records() -> None:
    hr, rr = [], []
    for i in range(24):
        p = sim(16, i)["params"]
        hr.append(p["hr0"])
        rr.append(p["rr0"])
    assert min(hr) < 70 and max(hr) > 140 and min(rr) < 14 and max(rr) > 28


def test_rr_base_spans_move_only_the_base_rate() -> None:
    """``rr_base``: each record's base RR is uniform over the spans (one draw, so every other
    draw of the record stays as it is), both spans are drawn, and the default single span is
    exactly the former U(8, 35) draw (the sets made before the option are unchanged)."""
    spans = ((6.0, 9.0), (34.0, 37.0))
    same = ("hr0", "hr_sd", "hr_tau_s", "rr_sd", "rr_tau_s", "spo2_0", "breath_cv", "family")
    base = []
    for i in range(12):
        a, b = sim(21, i)["params"], sim(21, i, rr_base=spans)["params"]
        assert any(lo <= b["rr0"] <= hi for lo, hi in spans), b["rr0"]
        assert {k: a[k] for k in same} == {k: b[k] for k in same}
        base.append(b["rr0"])
    assert min(base) < 9 and max(base) > 34
    draws = [vs._u_spans(np.random.default_rng([3, k]), spans) for k in range(4000)]
    assert all(6 <= x <= 9 or 34 <= x <= 37 for x in draws)
    assert np.mean(np.asarray(draws) < 20) == pytest.approx(0.5, abs=0.03)  # equal lengths
    rng, ref = np.random.default_rng(5), np.random.default_rng(5)
    assert vs._u_spans(rng, vs.RR_BASE) == ref.uniform(8, 35)
    for bad in ((), ((9, 6),), ((5, 9),), ((30, 41),), ((6, 9), (8, 12)), ((20, 30), (6, 9))):
        with pytest.raises(ValueError, match="rr_base"):
            vs.check_rr_base(bad)


def cli_set_stamp(tmp_path, key: str, name: str, records: int, option: list[str]):
    """The stamp of a set `data bidmc-sim --randomised` writes with ``option``, after
    checking that a default set's stamp has no ``key`` (what it was before the option);
    returns (stamp, the CLI runner, the command)."""
    from click.testing import CliRunner

    from liquid_stream.training.data.cli import bidmc_sim_cmd

    vs.write_vitals_sim(tmp_path / "plain", records=1, minutes=MINUTES, seed=22, progress=False)
    assert key not in json.loads((tmp_path / "plain" / vs.PARAMS_NAME).read_text())
    run = CliRunner().invoke
    r = run(
        bidmc_sim_cmd,
        [
            str(tmp_path / name),
            "--records",
            str(records),
            "--minutes",
            "1",
            "--randomised",
            "--seed",
            "22",
            *option,
        ],
    )
    assert r.exit_code == 0, r.output
    return json.loads((tmp_path / name / vs.PARAMS_NAME).read_text()), run, bidmc_sim_cmd


def test_rr_base_is_stamped_and_given_by_the_cli(tmp_path) -> None:
    doc, run, bidmc_sim_cmd = cli_set_stamp(
        tmp_path, "rr_base", "ends", 2, ["--rr-base", "6:9,34:37"]
    )
    assert doc["rr_base"] == [[6.0, 9.0], [34.0, 37.0]]
    assert all(p["rr0"] < 9 or p["rr0"] > 34 for p in doc["per_record"].values())
    for args, msg in (
        (["--rr-base", "6-9", "--randomised"], "LO:HI"),
        (["--rr-base", "6:9,8:12", "--randomised"], "disjoint"),
        (["--rr-base", "6:9"], "needs --randomised"),
    ):
        r = run(bidmc_sim_cmd, [str(tmp_path / "bad"), "--records", "1", "--minutes", "1", *args])
        assert r.exit_code != 0 and msg in r.output and not (tmp_path / "bad").exists()


def test_ectopy_default_leaves_every_record_as_it_was() -> None:
    """``ectopy="default"`` (explicit or not) is the simulator before the option: the same
    signals, draws and beats (figures measured on the code before the option, commit
    aaee18e), and the same keys in the same order in params (so params.json is unchanged)."""
    before = {
        (0, 0): (134, 0, 3524.706355359859, 79.516489431118),
        (0, 5): (238, 0, 6215.410437427235, 144.96446527701644),
        (7, 3): (222, 4, 6757.118749803871, 135.73093849649976),
    }
    for (seed, i), (n, n_ect, beat_sum, hr_mean) in before.items():
        a, b = sim(seed, i), sim(seed, i, ectopy="default")
        assert np.array_equal(a["signals"], b["signals"], equal_nan=True)
        assert list(a["params"]) == list(b["params"]) and "ectopy_pattern" not in a["params"]
        pa = a["params"]
        assert len(pa["beats"]) == n and int((pa["beat_kind"] == vs.ECTOPIC).sum()) == n_ect
        assert float(pa["beats"].sum()) == pytest.approx(beat_sum, rel=1e-12)
        assert float(a["truth"]["hr"].mean()) == pytest.approx(hr_mean, rel=1e-9)
        keys = list(pa)
        assert keys.index("ectopic_prob") == keys.index("hrv_white") + 1
        assert keys.index("ectopic_kind") == keys.index("ectopic_prob") + 1
    with pytest.raises(ValueError, match="ectopy"):
        sim(1, ectopy="many")


def rich(seed: int, index: int, minutes: float = 4.0, **force) -> dict:
    return vs.simulate_randomised(
        np.random.default_rng([seed, index]), minutes, ectopy="rich", force=force or None
    )


@pytest.mark.slow
def test_ectopy_rich_patterns_and_burden() -> None:
    """Rich records: isolated PVCs at 10-40 % of the beats, bigeminy alternates N V N V,
    trigeminy N N V, couplets V V, runs of 3-6; PVCs mostly; each pattern is drawn."""
    seen = {}
    for i in range(40):
        p = rich(33, i, 2.0)["params"]
        seen.setdefault(p["ectopy_pattern"], []).append(p["ectopic_kind"])
    assert set(seen) == set(vs.ECTOPY_PATTERNS)
    kinds = [k for v in seen.values() for k in v]
    assert kinds.count("pvc") / len(kinds) > 0.7
    no_af = {"af_episodes": []}
    for b in (0.1, 0.25, 0.4):
        p = rich(34, 0, 10.0, ectopy_pattern="isolated", ectopic_prob=b / (1 - b), **no_af)
        k = p["params"]["beat_kind"]
        assert np.mean(k == vs.ECTOPIC) == pytest.approx(b, abs=0.05)
        run = np.diff(np.flatnonzero(np.diff(np.r_[0, k == vs.ECTOPIC, 0]) != 0))[::2]
        assert run.max() == 1  # isolated: never two in a row
    whole = [[-20.0, 300.0]]
    for pattern, period in (("bigeminy", "NV"), ("trigeminy", "NNV")):
        k = rich(35, 1, ectopy_pattern=pattern, ectopy_episodes=whole, **no_af)["params"]
        text = "".join("NVA"[x] for x in k["beat_kind"][2:-2])
        tail = text[text.index("V") :]  # from the first ectopic beat on: the pattern exactly
        assert tail == (("V" + period[:-1]) * len(tail))[: len(tail)]
        assert np.mean(k["beat_kind"] == vs.ECTOPIC) == pytest.approx(1 / len(period), abs=0.02)
    for pattern, lo, hi in (("couplets", 2, 2), ("runs", 3, 6)):
        k = rich(36, 2, ectopy_pattern=pattern, ectopy_event_prob=0.15, ectopic_prob=0.0, **no_af)[
            "params"
        ]["beat_kind"]
        edges = np.diff(np.r_[0, k == vs.ECTOPIC, 0].astype(int))
        runs = np.flatnonzero(edges == -1) - np.flatnonzero(edges == 1)
        assert len(runs) >= 5 and runs.min() >= lo and runs.max() <= hi


def test_ectopy_rich_pauses_and_hr_label_over_all_beats() -> None:
    """A single PVC keeps the full compensatory pause (coupling c, then (2 - c) x the sinus
    interval); the HR label is 60 / mean interval over ALL beats (ectopic ones included), as a
    bedside monitor counts it: in bigeminy that is the sinus rate, not half of it."""
    force = {
        "ectopy_pattern": "bigeminy",
        "ectopy_episodes": [[-20.0, 300.0]],
        "af_episodes": [],
        "hr_sd": 0.0,
        "hr_changes": [],
        "hr0": 80.0,
    }
    rec = rich(37, 3, 1.0, **force)
    beats, kinds = rec["params"]["beats"], rec["params"]["beat_kind"]
    ibi = np.diff(beats)
    ect = np.flatnonzero(kinds == vs.ECTOPIC)
    ect = ect[(ect >= 1) & (ect < len(beats) - 1)]
    frac = ibi[ect - 1] / (ibi[ect - 1] + ibi[ect])  # c / 2
    assert ((frac >= 0.275 - 1e-12) & (frac <= 0.4 + 1e-12)).all()
    for i in range(0, N, 811):
        assert rec["truth"]["hr"][i] == pytest.approx(naive_rate(beats, i / FS, 8.0), rel=1e-12)
    hr = rec["truth"]["hr"][10 * FS : 50 * FS]
    assert np.abs(hr - 80).max() < 12  # all beats: about the sinus rate (HRV aside)
    normal = beats[kinds == vs.NORMAL]
    assert 60 / np.median(np.diff(normal)) < 45  # counting the normal beats alone: half
    runs = rich(
        38, 4, 1.0, ectopy_pattern="runs", ectopy_event_prob=0.2, ectopic_prob=0.0, af_episodes=[]
    )
    b = runs["params"]["beats"]
    for i in range(0, N, 811):
        assert runs["truth"]["hr"][i] == pytest.approx(naive_rate(b, i / FS, 8.0), rel=1e-12)


def test_ectopy_is_stamped_and_given_by_the_cli(tmp_path) -> None:
    doc, run, bidmc_sim_cmd = cli_set_stamp(tmp_path, "ectopy", "rich", 3, ["--ectopy", "rich"])
    assert doc["ectopy"] == "rich"
    assert all(p["ectopy_pattern"] in vs.ECTOPY_PATTERNS for p in doc["per_record"].values())
    r = run(bidmc_sim_cmd, [str(tmp_path / "bad"), "--records", "1", "--ectopy", "rich"])
    assert r.exit_code != 0 and "needs --randomised" in r.output


# ---------------------------------------------------------------------------- determinism


def test_deterministic_per_seed_and_index() -> None:
    a, b, c = sim(17, 3), sim(17, 3), sim(17, 4)
    np.testing.assert_array_equal(a["signals"], b["signals"])
    np.testing.assert_array_equal(a["numerics"], b["numerics"])
    assert vs.json_params(a["params"]) == vs.json_params(b["params"])
    assert not np.array_equal(a["numerics"], c["numerics"], equal_nan=True)


def test_family_changes_only_the_waveforms() -> None:
    """The same (seed, index) in both families: same beats, breaths and labels (paired)."""
    a, b = sim(18, 0, family="nk2"), sim(18, 0, family="param")
    np.testing.assert_array_equal(a["params"]["beats"], b["params"]["beats"])
    np.testing.assert_array_equal(a["numerics"], b["numerics"])
    assert not np.allclose(a["signals"][:, 1], b["signals"][:, 1], equal_nan=True)


def test_unknown_force_and_family_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown draw"):
        sim(19, force={"no_such_draw": 1})
    with pytest.raises(ValueError, match="family"):
        sim(19, family="ecgsyn")


# ---------------------------------------------------------------------------- WFDB


def test_wfdb_round_trip(tmp_path) -> None:
    import wfdb

    out = tmp_path / "vsim"
    rep = vs.write_vitals_sim(out, records=2, minutes=MINUTES, seed=20, progress=False)
    assert rep.records == 2 and rep.family_counts == {"nk2": 1, "param": 1}
    assert list_records(out) == ["bidmc01", "bidmc02"]
    assert (out / "RECORDS").read_text().split() == ["bidmc01", "bidmc01n", "bidmc02", "bidmc02n"]
    doc = json.loads((out / vs.PARAMS_NAME).read_text())
    assert doc["seed"] == 20 and doc["records"] == 2 and doc["families"] == ["nk2", "param"]
    assert [doc["per_record"][n]["family"] for n in ("bidmc01", "bidmc02")] == ["nk2", "param"]
    for i, name in enumerate(["bidmc01", "bidmc02"]):
        rec = vs.simulate_randomised(
            np.random.default_rng([20, i]), MINUTES, family=vs.record_family(i, vs.FAMILIES)
        )
        assert doc["per_record"][name] == json.loads(json.dumps(vs.json_params(rec["params"])))
        sig, fs, num = read_record(out, name, [s.rstrip(",") for s in vs.REC_NAMES])
        assert fs == FS and sig.shape == rec["signals"].shape
        step = 1.0 / np.asarray(wfdb.rdheader(str(out / name)).adc_gain)  # (7,)
        want = rec["signals"]
        np.testing.assert_array_equal(np.isnan(sig), np.isnan(want))
        ok = np.isfinite(want)
        assert (np.abs(sig - want)[ok] <= np.broadcast_to(step * 0.5 + 1e-9, want.shape)[ok]).all()
        for j, key in enumerate(["HR", "PULSE", "RESP", "SpO2"]):
            np.testing.assert_array_equal(num[key], rec["numerics"][:, j])
    with pytest.raises(FileExistsError):
        vs.write_vitals_sim(out, records=1, minutes=MINUTES, seed=20, progress=False)


def test_records_beyond_999_are_named_and_read(tmp_path) -> None:
    """More than 999 records (the main job's set): record 1000 is ``bidmc1000``, which the
    loaders list (in name order, beside ``bidmc999``) and read; the cap is refused."""
    out = tmp_path / "big"
    out.mkdir()
    rng = np.random.default_rng([0, 999])
    rec = vs.simulate_randomised(rng, MINUTES, family=vs.record_family(999, vs.FAMILIES))
    for i in (998, 999):  # bidmc999, bidmc1000
        vs.write_record(out, vs.record_name(i), rec)
    assert list_records(out) == ["bidmc1000", "bidmc999"]
    sig, fs, num = read_record(out, "bidmc1000", [s.rstrip(",") for s in vs.REC_NAMES])
    assert fs == FS and sig.shape == rec["signals"].shape and np.isfinite(num["HR"]).any()
    with pytest.raises(ValueError, match=f"1..{vs.MAX_RECORDS}"):
        vs.write_vitals_sim(tmp_path / "x", records=vs.MAX_RECORDS + 1, progress=False)
