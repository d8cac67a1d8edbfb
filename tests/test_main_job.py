"""``make demo``'s main job, end to end on tiny settings (``--smoke``): every step's
command runs for real (synthesis, training, export + verify, the KWS stream, kws-eval and
the live app, the BIDMC simulator, training on long crops / evaluation / export of the HR
and RR models and the vitals monitor with its alarm check), and the summary collects what
the steps wrote."""

from __future__ import annotations

import json

import pytest
import yaml

from liquid_stream import main_job

pytestmark = pytest.mark.slow


def test_main_job_smoke(tmp_path, capsys):
    out = tmp_path / "main"
    main_job.main(["--smoke", "--out", str(out)])
    summary = json.loads((out / "summary.json").read_text())
    n_steps = len(main_job.plan(out, main_job.Settings.smoke()))
    assert len(summary["steps_s"]) == n_steps
    assert 0 <= summary["kws"]["detection_rate"] <= 1
    for t in main_job.TARGETS:
        assert summary[f"bidmc_{t}"]["n"] > 0 and summary[f"bidmc_{t}"]["rmse"] > 0
        assert (out / "vitals" / f"{t}.onnx").stat().st_size > 0
        cfg = yaml.safe_load((out / "vitals" / f"train-{t}" / "config.yaml").read_text())
        assert cfg["model"]["frontend"]["hop"] == 10  # the full job's stack at 12.5 Hz
        assert (cfg["data"]["channel_off"] > 0) == bool(main_job.CHANNEL_OFF[t])  # passes 3+
        # the last of PASSES[t] passes of crops, each from the one before at half its lr
        assert cfg["optim"]["lr"] == main_job.AGAIN_LR / 2 ** (main_job.PASSES[t] - 1)
        passes = sorted((out / "vitals").glob(f"train-{t}-pass*"))
        assert len(passes) == main_job.PASSES[t] - 1
        inits = [
            yaml.safe_load((d / "config.yaml").read_text())["train"]["init"]
            for d in (*passes, out / "vitals" / f"train-{t}")
        ]
        assert inits[0].endswith(f"train-{t}-stream/best.pt")
        assert [i.rsplit("/", 2)[-2] for i in inits[1:]] == [d.name for d in passes]
    spo2 = ("spo2",) if main_job.shipped_spo2() else ()  # the shipped oximeter model
    assert set(summary["monitor"]["metrics"]) == set(main_job.TARGETS + spo2)
    checked = summary["monitor"]["alarm_check"]  # every alarm rule checked against the ref.
    assert set(checked) == set(main_job.monitor_alarms().split(","))
    assert ("spo2<90" in checked) == bool(spo2)
    assert all(c["true_s"] + c["false_s"] <= c["active_s"] for c in checked.values())
    log = (out / "commands.log").read_text().splitlines()
    assert len(log) == n_steps and all(line.startswith("$ liquid-stream ") for line in log)
    # a second run skips every step whose outputs exist
    main_job.main(["--smoke", "--out", str(out)])
    assert capsys.readouterr().out.count("done already") >= n_steps - 3
