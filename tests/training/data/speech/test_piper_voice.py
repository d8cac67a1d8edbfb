"""The piper (neural) engine of the synthetic Speech Commands generator
(training/data/speech/piper_voice.py, training/data/speech/speech_synth.py) and the engine
selection."""

from __future__ import annotations

import json
import re
import wave
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from liquid_stream.training.data.cli import data as data_cli
from liquid_stream.training.data.speech import piper_voice, speech_synth
from liquid_stream.training.data.speech.speech_synth import (
    STAMP_NAME,
    SynthToolMissing,
    generate_speech_synth,
    make_speakers,
    plan_synth,
)

NAME_RE = re.compile(r"^[0-9a-f]{8}_nohash_\d+\.wav$")
WORDS = ("yes", "nine")
PER_WORD = 3  # one clip per split
SPEAKERS = 6


def _tools_missing() -> str | None:
    try:
        speech_synth.check_tools(("espeak-ng", "flite", "festival"))
    except SynthToolMissing as e:
        return str(e)
    return None


needs_piper = pytest.mark.skipif(
    piper_voice.piper_missing() is not None, reason=str(piper_voice.piper_missing())
)

pytestmark = pytest.mark.tts
needs_tools = pytest.mark.skipif(_tools_missing() is not None, reason=str(_tools_missing()))


def _generate(out: Path, seed: int = 0, workers: int = 1, **kw) -> Path:
    kw = {"engines": ("piper",), "words": WORDS, "n_speakers": SPEAKERS, **kw}
    generate_speech_synth(
        out, PER_WORD, seed=seed, workers=workers, noise_seconds=1.0, progress=False, **kw
    )
    return out


@pytest.fixture(scope="module")
def piper_root(tmp_path_factory) -> Path:
    if piper_voice.piper_missing():
        pytest.skip(piper_voice.piper_missing())
    return _generate(tmp_path_factory.mktemp("piper") / "sc")


def _clips(root: Path) -> dict[str, bytes]:
    return {
        f"{p.parent.name}/{p.name}": p.read_bytes()
        for p in sorted(root.glob("*/*.wav"))
        if p.parent.name != "_background_noise_"
    }


def _f0(x: np.ndarray, rate: int, fmin: float = 60.0, fmax: float = 400.0) -> float:
    """Median F0 (Hz) over the loud, periodic 40 ms frames: the autocorrelation peak in
    [1 / fmax, 1 / fmin], refined by a parabola through its neighbours."""
    n = int(0.04 * rate)
    lo, hi = int(rate / fmax), int(rate / fmin)
    frames = [x[i : i + n] for i in range(0, len(x) - n, n // 2)]
    loud = max(float(np.sum(f**2)) for f in frames)
    out = []
    for f in frames:
        if np.sum(f**2) < 0.1 * loud:
            continue
        f = f - f.mean()
        ac = np.correlate(f, f, "full")[n - 1 :]
        k = lo + int(np.argmax(ac[lo:hi]))
        if ac[k] < 0.3 * ac[0]:
            continue
        a, b, c = ac[k - 1], ac[k], ac[k + 1]
        out.append(rate / (k + 0.5 * (a - c) / (a - 2 * b + c)))
    assert len(out) >= 3, "no voiced frames"
    return float(np.median(out))


# ---------------------------------------------------------------------------- generator


@needs_piper
def test_piper_clips_layout(piper_root: Path) -> None:
    """16 kHz mono int16 clips of exactly 1 s in the v0.02 layout, all piper speakers."""
    dirs = sorted(p.name for p in piper_root.iterdir() if p.is_dir())
    assert dirs == sorted([*WORDS, "_background_noise_"])
    clips = _clips(piper_root)
    assert len(clips) == len(WORDS) * PER_WORD
    for rel in clips:
        assert NAME_RE.match(rel.split("/")[1]), rel
        with wave.open(str(piper_root / rel)) as w:
            assert (w.getframerate(), w.getnchannels(), w.getsampwidth()) == (16000, 1, 2)
            assert w.getnframes() == 16000
            x = np.frombuffer(w.readframes(16000), dtype="<i2")
        assert np.abs(x).max() > 1000, f"{rel} is (nearly) silent"
    stamp = json.loads((piper_root / STAMP_NAME).read_text())
    assert stamp["engines"] == ["piper"] and stamp["report"]["engines"] == ["piper"]
    assert stamp["revision"] == speech_synth.GENERATOR_REVISION
    jobs, _ = plan_synth(PER_WORD, WORDS, 0, SPEAKERS, ["piper"])
    assert sorted(j.relpath for j in jobs) == sorted(clips)
    assert {j.voice.engine for j in jobs} == {"piper"}


@needs_piper
def test_piper_deterministic(piper_root: Path, tmp_path: Path) -> None:
    """Same seed: identical bytes (also with two workers); another seed: other audio."""
    again = _generate(tmp_path / "again", workers=2)
    assert _clips(again) == _clips(piper_root)
    for name in ("validation_list.txt", "testing_list.txt"):
        assert (again / name).read_bytes() == (piper_root / name).read_bytes()
    other = _clips(_generate(tmp_path / "other", seed=1))
    assert set(other.values()).isdisjoint(_clips(piper_root).values())


@needs_piper
def test_piper_model_seeded() -> None:
    """The model's noise comes from the seed (not onnxruntime's generator): the same seed
    gives the same samples, another seed (or prosody) other samples."""
    model = piper_voice.load_voice()
    assert piper_voice.load_voice() is model  # loaded once per process
    a = model.synthesize("seven", 1.0, 0.667, 0.8, seed=3)
    assert np.array_equal(a, model.synthesize("seven", 1.0, 0.667, 0.8, seed=3))
    b = model.synthesize("seven", 1.0, 0.667, 0.8, seed=4)
    assert len(a) != len(b) or not np.array_equal(a, b)
    slow = model.synthesize("seven", 1.3, 0.667, 0.8, seed=3)
    assert len(slow) > 1.15 * len(a)
    assert model.sample_rate == 22050 and 0.2 < len(a) / model.sample_rate < 1.5


def test_piper_variants_speaker_disjoint() -> None:
    """Each piper variant is its own speaker (SHA-1 of its config), split speaker-disjoint
    and stratified by engine like the others."""
    speakers = make_speakers(60, 0, ["piper"])
    assert len({v.speaker_id for v in speakers}) == 60
    assert len({(v.pitch, v.formant, v.speed) for v in speakers}) == 60
    lo, hi = speech_synth.PIPER_PITCH_ST
    assert all(v.voice == "joe" and lo <= v.pitch <= hi for v in speakers)
    assert min(v.pitch for v in speakers) < -2 and max(v.pitch for v in speakers) > 3
    jobs, split_of = plan_synth(30, ("yes", "no"), seed=0, engines=["piper"])
    by_split: dict[str, set[str]] = {"train": set(), "val": set(), "test": set()}
    for j in jobs:
        by_split[split_of[j.voice.speaker_id]].add(j.voice.speaker_id)
    assert all(by_split.values())
    assert not by_split["train"] & by_split["val"] and not by_split["train"] & by_split["test"]
    assert not by_split["val"] & by_split["test"]
    # with all engines, piper speakers are in every split (engine-stratified split)
    jobs, split_of = plan_synth(30, seed=0)
    piper = {j.voice.speaker_id for j in jobs if j.voice.engine == "piper"}
    assert {split_of[k] for k in piper} == {"train", "val", "test"}
    assert 0.15 < len(piper) / len(split_of) < 0.35


# ---------------------------------------------------------------------------- waveform


def test_pitch_shift_harmonic_tone() -> None:
    """+3 semitones on a 120 Hz harmonic tone: F0 x 2**(3/12), duration kept; a formant
    shift alone keeps F0."""
    rate = 22050
    t = np.arange(int(0.8 * rate)) / rate
    x = sum(np.sin(2 * np.pi * 120 * h * t) / h for h in range(1, 15))
    y, r = piper_voice.shift_voice(x, rate, 3.0, 0.0)
    assert abs(len(y) / r - len(x) / rate) < 0.005
    assert _f0(y, r) / _f0(x, rate) == pytest.approx(2 ** (3 / 12), rel=0.01)
    y, r = piper_voice.shift_voice(x, rate, -3.0, 1.0)
    assert _f0(y, r) / _f0(x, rate) == pytest.approx(2 ** (-3 / 12), rel=0.01)
    y, r = piper_voice.shift_voice(x, rate, 0.0, 3.0)
    assert r == rate and len(y) == len(x)
    assert _f0(y, r) == pytest.approx(_f0(x, rate), rel=0.01)
    for factor in (0.8, 1.3):  # WSOLA: length x factor, pitch kept
        z = piper_voice.time_stretch(x, factor, rate)
        assert len(z) == round(len(x) * factor)
        assert _f0(z, rate) == pytest.approx(_f0(x, rate), rel=0.01)


@needs_piper
def test_pitch_shift_piper_word() -> None:
    """The speaker perturbation moves the F0 of real piper speech by +3 semitones."""
    model = piper_voice.load_voice()
    x = model.synthesize("nine", 1.0, 0.667, 0.8, seed=0)
    f0 = _f0(x, model.sample_rate)
    assert 70 < f0 < 200  # the joe voice: a male speaker
    y, r = piper_voice.shift_voice(x, model.sample_rate, 3.0, 1.0)
    assert _f0(y, r) / f0 == pytest.approx(2 ** (3 / 12), rel=0.03)
    y, r = piper_voice.shift_voice(x, model.sample_rate, 0.0, 2.0)  # formants only
    assert _f0(y, r) / f0 == pytest.approx(1.0, rel=0.03)
    y2, _ = piper_voice.render(
        "nine",
        length_scale=1.0,
        noise_scale=0.667,
        noise_w=0.8,
        pitch_st=0.0,
        formant_st=2.0,
        seed=0,
    )
    assert np.array_equal(y, y2)


# ---------------------------------------------------------------------------- engines


@needs_tools
def test_missing_piper_is_skipped(monkeypatch, tmp_path: Path, capsys) -> None:
    """Without piper the generator leaves it out with one note (its share goes to the
    others), check_tools reports it as optional; asking for piper alone is an error."""
    why = "Python package(s) piper-tts not installed (install with: ...)"
    monkeypatch.setattr(piper_voice, "piper_missing", lambda: why)
    assert speech_synth.check_tools() == {"piper": why}
    assert speech_synth.available_engines() == ("espeak-ng", "flite", "festival")
    capsys.readouterr()
    generate_speech_synth(
        tmp_path / "x",
        3,
        words=("yes",),
        n_speakers=12,
        workers=1,
        noise_seconds=1.0,
        progress=False,
    )
    err = capsys.readouterr().err
    assert err.count("note: TTS engine piper skipped") == 1 and "piper-tts" in err
    stamp = json.loads((tmp_path / "x" / STAMP_NAME).read_text())
    assert stamp["engines"] == ["espeak-ng", "flite", "festival"]
    jobs, _ = plan_synth(3, ("yes",), 0, 12, stamp["engines"])
    assert sorted(j.relpath for j in jobs) == sorted(_clips(tmp_path / "x"))
    assert "piper" not in {v.engine for v in make_speakers(200, 0, stamp["engines"])}
    with pytest.raises(SynthToolMissing, match="piper-tts"):
        generate_speech_synth(tmp_path / "y", 3, engines=["piper"], progress=False)
    res = CliRunner().invoke(
        data_cli, ["speech-synth", str(tmp_path / "y"), "--per-word", "3", "--engines", "piper"]
    )
    assert res.exit_code != 0 and "piper-tts" in res.output
    assert not (tmp_path / "y").exists()


@needs_tools
@needs_piper
def test_cli_engines_restricts(tmp_path: Path) -> None:
    """--engines: only those engines' speakers (a leave-one-engine-out pair of sets), the
    engine set in the stamp; an unknown engine is a usage error."""
    base = ["speech-synth", "--per-word", "3", "--words", "yes,no", "--speakers", "8"]
    base += ["--noise-seconds", "1", "--workers", "1"]
    for name, engines in (("train", "espeak-ng,flite,festival"), ("test", "piper")):
        out = tmp_path / name
        res = CliRunner().invoke(data_cli, [*base[:1], str(out), *base[1:], "--engines", engines])
        assert res.exit_code == 0, res.output
        assert f"engines: {engines.replace(',', ', ')}" in res.output
        stamp = json.loads((out / STAMP_NAME).read_text())
        assert stamp["engines"] == engines.split(",")
        jobs, _ = plan_synth(3, ("yes", "no"), 0, 8, stamp["engines"])
        assert sorted(j.relpath for j in jobs) == sorted(_clips(out))
        assert {j.voice.engine for j in jobs} <= set(stamp["engines"])
    only_piper, _ = plan_synth(3, ("yes", "no"), 0, 8, ["piper"])
    assert {j.voice.engine for j in only_piper} == {"piper"}
    res = CliRunner().invoke(
        data_cli, ["speech-synth", str(tmp_path / "z"), "--per-word", "3", "--engines", "sam"]
    )
    assert res.exit_code == 2 and "--engines" in res.output and "sam" in res.output
    with pytest.raises(ValueError, match="unknown TTS engine"):
        plan_synth(3, engines=["espeak"])
