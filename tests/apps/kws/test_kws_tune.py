"""Threshold and smoothing chosen on a validation stream (apps/kws/tune.py, `kws-tune`),
and the detection rule shared by the live spotter and the replay (`detect_events`)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from click.testing import CliRunner
from fixtures_kws import write_labels_csv, write_tone_wav
from test_kws import tone_model  # noqa: F401 - the session fixture (a trained tone spotter)

from liquid_stream.apps.kws.cli import kws_eval_cmd, kws_tune_cmd
from liquid_stream.apps.kws.spotter import KeywordSpotter, detect_events
from liquid_stream.apps.kws.tune import smooth, tune_thresholds
from liquid_stream.io.labels import read_label_csv


def literal_rule(s, thresholds, refractory):
    """The rule written sample by sample (the spotter's loop before it was shared)."""
    armed, last, out = np.ones(s.shape[1], bool), -np.inf, []
    for t in range(len(s)):
        row = s[t] >= thresholds
        armed |= ~row
        fire = row & armed
        if fire.any() and t - last >= refractory:
            k = int(np.argmax(np.where(fire, s[t], -1.0)))
            armed[k] = False
            last = t
            out.append((t, k))
    return out


@pytest.mark.parametrize("seed", range(5))
def test_detect_events_equals_the_literal_rule_in_any_split(seed):
    rng = np.random.default_rng(seed)
    s = smooth(rng.random((3000, 4)) ** 6, 20)  # sparse bumps over the thresholds
    thr = rng.uniform(0.1, 0.3, 4)
    ref = literal_rule(s, thr, 50)
    assert len(ref) > 5
    armed, last, got = np.ones(4, bool), -np.inf, []
    pos = 0
    for n in rng.integers(1, 200, 100):  # fed in random pieces, as the live app does
        fired, last = detect_events(s[pos : pos + n], thr, 50, armed, last, pos)
        got += fired
        pos += n
        if pos >= len(s):
            break
    assert got == ref


@pytest.fixture()
def val_stream(tmp_path):
    # a "validation" stream: other times and noise than the test stream of test_kws
    events = [
        (1.0, 0.4, "440 Hz"),
        (2.6, 0.5, "880 Hz"),
        (4.3, 0.3, "880 Hz"),
        (5.8, 0.5, "440 Hz"),
        (7.5, 0.4, "440 Hz"),
    ]
    wav = write_tone_wav(tmp_path / "val.wav", 8000, events=events, seed=5)
    return wav, write_labels_csv(tmp_path / "val.csv", events=events)


@pytest.mark.slow
def test_tuning_replays_the_app(tone_model, val_stream):  # noqa: F811
    wav, csv = val_stream
    from liquid_stream.apps.common.audio import read_wav

    audio, rate, _ = read_wav(wav)
    res = tune_thresholds(
        tone_model, audio, read_label_csv(csv), max_fa_per_hour=0.0, sample_rate=rate
    )
    assert res.detection_rate == 1.0 and res.false_accepts_per_hour == 0.0
    # the replayed grid point agrees with the live spotter at that threshold and window
    for row in res.table[:: max(1, len(res.table) // 12)]:
        spotter = KeywordSpotter(tone_model, threshold=row["threshold"], smooth_ms=row["smooth_ms"])
        dets = spotter.run(audio)
        from liquid_stream.apps.kws.spotter import evaluate_detections

        live = evaluate_detections(dets, read_label_csv(csv), spotter.keywords, len(audio) / rate)
        assert abs(live["detection_rate"] - row["detection_rate"]) <= 0.2, row
    with pytest.raises(ValueError, match="model's rate"):
        tune_thresholds(tone_model, audio, read_label_csv(csv), sample_rate=16000)


def test_kws_tune_writes_metadata_used_by_default(tone_model, val_stream, tmp_path):  # noqa: F811
    wav, csv = val_stream
    model = tmp_path / "tuned.onnx"
    shutil.copy(tone_model, model)
    grid = tmp_path / "grid.json"
    r = CliRunner().invoke(
        kws_tune_cmd,
        [
            str(model),
            "--stream",
            str(wav),
            "--labels",
            str(csv),
            "--max-fa-per-hour",
            "0",
            "--out",
            str(grid),
        ],
    )
    assert r.exit_code == 0, r.output
    assert "threshold" in r.output and "wrote kws_threshold" in r.output
    table = json.loads(grid.read_text())
    chosen = [row for row in table if f"threshold {row['threshold']:.2f}" in r.output]
    assert chosen
    spotter = KeywordSpotter(model)  # no threshold given: the tuned one
    tuned = float(spotter.streamer.meta_json("kws_threshold"))
    assert spotter.thresholds[0] == pytest.approx(tuned)
    assert spotter.smooth_ms == float(spotter.streamer.meta_json("kws_smooth_ms"))
    assert KeywordSpotter(tone_model).thresholds[0] == 0.8  # untuned: the old default
    out = tmp_path / "eval.json"
    r = CliRunner().invoke(
        kws_eval_cmd, [str(model), "--stream", str(wav), "--labels", str(csv), "--out", str(out)]
    )
    assert r.exit_code == 0, r.output
    assert json.loads(out.read_text())["threshold"] == spotter.thresholds[0]
    bad = CliRunner().invoke(
        kws_tune_cmd, [str(model), "--stream", str(tmp_path / "nope.wav"), "--labels", str(csv)]
    )
    assert bad.exit_code != 0 and "Traceback" not in bad.output


def test_kws_tune_grid_does_not_depend_on_the_call_length(tone_model, val_stream, tmp_path):  # noqa: F811
    """`--chunk-ms` only changes how much audio each model call takes (the main job scores in
    100 ms calls): the whole grid equals the 10 ms one, and the model file is not written."""
    wav, csv = val_stream
    grids = []
    for chunk_ms in ("10", "100", "37.5"):
        out = tmp_path / f"grid-{chunk_ms}.json"
        r = CliRunner().invoke(
            kws_tune_cmd,
            [
                str(tone_model),
                "--stream",
                str(wav),
                "--labels",
                str(csv),
                "--chunk-ms",
                chunk_ms,
                "--no-write",
                "--out",
                str(out),
            ],
        )
        assert r.exit_code == 0, r.output
        assert "wrote" not in r.output
        grids.append(json.loads(out.read_text()))
    for grid in grids[1:]:
        assert len(grid) == len(grids[0])
        for a, b in zip(grids[0], grid, strict=True):
            assert (a["threshold"], a["smooth_ms"]) == (b["threshold"], b["smooth_ms"])
            assert a["detection_rate"] == b["detection_rate"], (a, b)
            assert a["false_accepts_per_hour"] == b["false_accepts_per_hour"], (a, b)
