"""The pretrained models shipped inside the package (liquid_stream/models): they load, carry
the metadata the apps need, and the keyword spotter really spots keywords spoken by
synthetic voices it was not trained on (a check of the shipped weights themselves)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from liquid_stream.models import KWS, available, card, shipped

SC10 = ("yes", "no", "up", "down", "left", "right", "on", "off", "stop", "go")


def test_shipped_kws_loads_with_its_metadata_and_card():
    from liquid_stream.apps.kws.spotter import KeywordSpotter

    assert KWS in available()
    path = shipped(KWS)
    assert path.stat().st_size < 8e6  # a few MB
    spotter = KeywordSpotter(path)
    assert spotter.sample_rate == 16000
    assert spotter.labels == [*SC10, "_silence_"] and spotter.keywords == list(SC10)
    meta = spotter.streamer.metadata
    assert json.loads(meta["model_config"])["frontend"]["kind"] == "logmel"
    assert 0 < float(meta["kws_threshold"]) < 1  # chosen on a validation stream
    text = card(KWS)
    for needed in ("liquid-stream train speech-stream", "commit", "detection", "Limits"):
        assert needed in text
    with pytest.raises(FileNotFoundError, match="no shipped model"):
        shipped("nope")


@pytest.fixture(scope="module")
def unseen_voices_stream(tmp_path_factory):
    """A 16 kHz stream of SC10 keywords by synthetic speakers of another seed than the
    shipped model's data (seed 0), with their true times."""
    from liquid_stream.training.data.speech.kws_stream import build_kws_stream, write_kws_stream
    from liquid_stream.training.data.speech.speech_synth import generate_speech_synth

    root = tmp_path_factory.mktemp("voices") / "sc"
    generate_speech_synth(
        root,
        8,
        words=SC10,
        seed=12345,
        workers=2,
        n_speakers=16,
        engines=("espeak-ng", "flite", "festival"),
    )
    # every speaker of this seed is new to the shipped model: stream all of their clips
    clips = sorted(
        str(p.relative_to(root)) for p in root.glob("*/*.wav") if not p.parent.name.startswith("_")
    )
    (root / "testing_list.txt").write_text("\n".join(clips) + "\n")
    x, rows = build_kws_stream(root, 1.5, SC10, seed=3, keyword_prob=1.0, noise_gain=0.005)
    wav, csv = root.parent / "stream.wav", root.parent / "stream.csv"
    write_kws_stream(wav, csv, x, rows)
    return wav, csv, rows


@pytest.mark.tts
def test_kws_without_model_uses_the_shipped_spotter_and_detects(unseen_voices_stream):
    from liquid_stream.apps.kws.cli import kws_cmd, kws_eval_cmd

    wav, csv, rows = unseen_voices_stream
    r = CliRunner().invoke(kws_cmd, ["--input", str(wav), "--fast", "--no-ui"])
    assert r.exit_code == 0, r.output
    assert f"the shipped {KWS} spotter" in r.output
    r = CliRunner().invoke(
        kws_eval_cmd, [str(shipped(KWS)), "--stream", str(wav), "--labels", str(csv)]
    )
    assert r.exit_code == 0, r.output
    line = next(ln for ln in r.output.splitlines() if ln.startswith("detection rate"))
    rate, n_fa = float(line.split()[2]), int(line.split("false accepts ")[1].split()[0])
    # measured 0.675 (27 / 40) with no false accept (2026-11-26); an untrained or broken
    # model detects ~0, a random one fires false accepts
    assert len(rows) >= 30 and rate >= 0.5 and n_fa <= 1, r.output
    assert np.isfinite(rate)


@pytest.mark.parametrize("name", available())
def test_every_model_card_opens_with_hugging_face_front_matter(name):
    """The card starts with YAML front matter in the Hugging Face form: licence, intended
    and out-of-scope use, training data, and metrics whose entries name the data and give
    a number (the card's own tables hold the rest)."""
    import yaml

    text = card(name)
    assert text.startswith("---\n"), f"{name}.md has no front matter"
    front = yaml.safe_load(text.split("---\n", 2)[1])
    for key in ("license", "intended_use", "out_of_scope_use", "training_data", "metrics"):
        assert front.get(key), f"{name}.md front matter lacks {key!r}"
    assert front["model_name"] == name
    for m in front["metrics"]:
        assert m["name"] and m["data"] and isinstance(m["value"], int | float), m
