"""Speech Commands data: the synthetic generator, the v0.02 loader, SpeechStream."""

from __future__ import annotations

import json
import re
import shutil
import wave
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from fixtures_speech import (
    FIXTURE_PER_WORD,
    FIXTURE_WORDS,
    synth_fixture,
    tiny_root,
)

from liquid_stream.training.data.cli import data as data_cli
from liquid_stream.training.data.speech import speech_synth
from liquid_stream.training.data.speech.speech import (
    SC10_WORDS,
    SC35_WORDS,
    SpeechCommands,
    SpeechStream,
    compute_normalizer,
    make_step_labels,
    read_wav,
    speech_end,
)
from liquid_stream.training.data.speech.speech_synth import (
    STAMP_NAME,
    SynthToolMissing,
    default_synth_root,
    ensure_synth,
    generate_speech_synth,
    plan_synth,
    write_wav,
)

pytestmark = pytest.mark.tts

NAME_RE = re.compile(r"^[0-9a-f]{8}_nohash_\d+\.wav$")


def _tts_missing() -> str | None:
    try:
        speech_synth.check_tools()
    except SynthToolMissing as e:
        return str(e)
    return None


needs_tts = pytest.mark.skipif(_tts_missing() is not None, reason=str(_tts_missing()))


@pytest.fixture(scope="session")
def synth_root(tmp_path_factory) -> Path:
    if _tts_missing():
        pytest.skip(_tts_missing())
    root = tmp_path_factory.mktemp("speech") / "sc"
    synth_fixture(root)
    return root


def _lists(root: Path) -> tuple[list[str], list[str]]:
    val = (root / "validation_list.txt").read_text().split()
    test = (root / "testing_list.txt").read_text().split()
    return val, test


def _speaker(rel: str) -> str:
    return rel.split("/")[1].split("_nohash_")[0]


# ---------------------------------------------------------------------------- generator


def test_synth_layout(synth_root: Path) -> None:
    dirs = sorted(p.name for p in synth_root.iterdir() if p.is_dir())
    assert dirs == sorted([*FIXTURE_WORDS, "_background_noise_"])
    wavs = sorted(synth_root.glob("*/*.wav"))
    clips = [p for p in wavs if p.parent.name != "_background_noise_"]
    assert len(clips) == len(FIXTURE_WORDS) * FIXTURE_PER_WORD
    for p in clips:
        assert NAME_RE.match(p.name), p.name
        with wave.open(str(p)) as w:
            assert (w.getframerate(), w.getnchannels(), w.getsampwidth()) == (16000, 1, 2)
            assert 0 < w.getnframes() <= 16000
        x = read_wav(p)
        assert np.abs(x).max() > 1000, f"{p} is (nearly) silent"
    noise = sorted(p.name for p in (synth_root / "_background_noise_").glob("*.wav"))
    assert noise == ["brown_noise.wav", "pink_noise.wav", "white_noise.wav"]
    for p in (synth_root / "_background_noise_").glob("*.wav"):
        assert len(read_wav(p, max_samples=None)) == 32000
    stamp = json.loads((synth_root / STAMP_NAME).read_text())
    assert stamp["per_word"] == FIXTURE_PER_WORD and stamp["seed"] == 0
    assert stamp["revision"] == speech_synth.GENERATOR_REVISION
    assert synth_root.stat().st_mode & 0o777 == 0o755


def test_synth_split_by_speaker(synth_root: Path) -> None:
    val, test = _lists(synth_root)
    every = {f"{p.parent.name}/{p.name}" for p in synth_root.glob("*/*.wav")}
    every = {p for p in every if not p.startswith("_")}
    assert set(val) <= every and set(test) <= every and not set(val) & set(test)
    train = every - set(val) - set(test)
    spk = {s: {_speaker(p) for p in ps} for s, ps in [("tr", train), ("va", val), ("te", test)]}
    assert not spk["tr"] & spk["va"] and not spk["tr"] & spk["te"] and not spk["va"] & spk["te"]
    assert len(spk["va"]) >= 2 and len(spk["te"]) >= 2 and len(spk["tr"]) >= 10
    # every word is in every split
    for w in FIXTURE_WORDS:
        assert any(p.startswith(w + "/") for p in val) and any(p.startswith(w + "/") for p in test)


@needs_tts
def test_synth_deterministic_across_workers(synth_root: Path, tmp_path: Path) -> None:
    """A word regenerated alone with one worker gives the same bytes as the fixture
    (a word with clips from all the engines, festival batched differently)."""
    engines = speech_synth.available_engines()
    jobs, _ = plan_synth(FIXTURE_PER_WORD, FIXTURE_WORDS, 0, 20, engines)
    word = next(
        w for w in FIXTURE_WORDS if {j.voice.engine for j in jobs if j.word == w} == set(engines)
    )
    generate_speech_synth(
        tmp_path / "one",
        FIXTURE_PER_WORD,
        words=(word,),
        seed=0,
        workers=1,
        n_speakers=20,
        noise_seconds=1.0,
        progress=False,
    )
    ours = sorted((tmp_path / "one" / word).glob("*.wav"))
    assert [p.name for p in ours] == sorted(p.name for p in (synth_root / word).glob("*.wav"))
    for p in ours:
        assert p.read_bytes() == (synth_root / word / p.name).read_bytes()


def test_plan_speakers_and_seed() -> None:
    jobs, split_of = plan_synth(100, seed=0)
    assert len(jobs) == 35 * 100
    assert len({j.relpath for j in jobs}) == len(jobs)
    counts = {s: sum(v == s for v in split_of.values()) for s in ("train", "val", "test")}
    assert counts == {"train": 160, "val": 20, "test": 20}
    engines = {j.voice.engine for j in jobs}
    assert engines == set(speech_synth.ENGINES)
    engine_of = {j.voice.speaker_id: j.voice.engine for j in jobs}
    for split in ("train", "val", "test"):  # stratified: every split hears every engine
        assert {engine_of[k] for k, v in split_of.items() if v == split} == engines
    _, split30 = plan_synth(30, seed=0)
    assert sorted(split30.values()).count("val") == 6
    again, _ = plan_synth(100, seed=0)
    other, _ = plan_synth(100, seed=1)
    assert again == jobs and other != jobs


def test_synth_engines_in_fixture(synth_root: Path) -> None:
    stamp = json.loads((synth_root / STAMP_NAME).read_text())
    assert stamp["engines"] == list(speech_synth.available_engines())
    jobs, _ = plan_synth(FIXTURE_PER_WORD, FIXTURE_WORDS, 0, stamp["n_speakers"], stamp["engines"])
    assert {j.voice.engine for j in jobs} == set(stamp["engines"])


def test_synth_missing_tool(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setattr(
        speech_synth.shutil, "which", lambda p: None if p == "flite" else "/usr/bin/" + p
    )
    with pytest.raises(SynthToolMissing, match=r"flite.*apt-get install"):
        generate_speech_synth(tmp_path / "x", 3, progress=False)
    res = CliRunner().invoke(data_cli, ["speech-synth", str(tmp_path / "x"), "--per-word", "3"])
    assert res.exit_code != 0 and "apt-get install" in res.output and "flite" in res.output
    assert not (tmp_path / "x").exists()
    monkeypatch.setattr(speech_synth, "FESTIVAL_VOICE_ROOT", tmp_path / "none")
    with pytest.raises(SynthToolMissing, match=r"festvox-kallpc16k.*festvox-us-slt-hts"):
        speech_synth.check_tools()


def test_synth_refuses_foreign_folder(tmp_path: Path) -> None:
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    with pytest.raises(FileExistsError, match="not empty"):
        generate_speech_synth(tmp_path / "mine", 3, progress=False)
    with pytest.raises(FileExistsError, match="refusing"):
        generate_speech_synth(tmp_path / "mine", 3, progress=False, overwrite=True)
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"


def test_ensure_synth_cache(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("LIQUID_STREAM_CACHE", str(tmp_path / "cache"))
    assert default_synth_root() == tmp_path / "cache" / "speech-synth-v1"
    calls = []

    def fake(root, per_word, seed=0, **kw):
        calls.append(per_word)
        Path(root).mkdir(parents=True, exist_ok=True)
        stamp = {"version": 1, "per_word": per_word, "seed": seed, "n_speakers": None}
        stamp["revision"] = speech_synth.GENERATOR_REVISION
        stamp["words"] = list(SC35_WORDS)
        stamp["engines"] = list(speech_synth.available_engines())
        (Path(root) / STAMP_NAME).write_text(json.dumps(stamp))

    monkeypatch.setattr(speech_synth, "generate_speech_synth", fake)
    assert ensure_synth(5) == default_synth_root()
    assert ensure_synth(5) == default_synth_root()  # cached
    assert ensure_synth(3) == default_synth_root()  # a bigger cache is reused
    assert calls == [5]
    ensure_synth(8)  # more requested: regenerated
    ensure_synth(8, seed=1)  # other seed: regenerated
    assert calls == [5, 8, 8]
    stamp = json.loads((default_synth_root() / STAMP_NAME).read_text())
    stamp["revision"] -= 1  # made by an older generator: regenerated
    (default_synth_root() / STAMP_NAME).write_text(json.dumps(stamp))
    ensure_synth(8, seed=1)
    assert calls == [5, 8, 8, 8]


def test_cli_help() -> None:
    res = CliRunner().invoke(data_cli, ["speech-synth", "--help"])
    assert res.exit_code == 0 and "--per-word" in res.output and "--seed" in res.output


@needs_tts
def test_cli_generates(tmp_path: Path) -> None:
    args = ["speech-synth", str(tmp_path / "o"), "--per-word", "3", "--words", "yes,no"]
    args += ["--speakers", "6", "--noise-seconds", "1", "--workers", "1"]
    res = CliRunner().invoke(data_cli, args)
    assert res.exit_code == 0, res.output
    assert "clips/s" in res.output and re.search(r"val\s*:\s+2 clips,\s+1 speakers", res.output)
    assert len(list((tmp_path / "o").glob("*/*_nohash_*.wav"))) == 6
    res = CliRunner().invoke(data_cli, args)  # exists: refused without --force
    assert res.exit_code != 0 and "--force" in res.output
    assert CliRunner().invoke(data_cli, [*args, "--force"]).exit_code == 0
    res = CliRunner().invoke(data_cli, [*args[:4], "--words", "yes,maybe"])
    assert res.exit_code != 0 and "maybe" in res.output


# ---------------------------------------------------------------------------- loader


def test_loader_splits_follow_lists(synth_root: Path) -> None:
    val, test = _lists(synth_root)
    kw = set(SC10_WORDS)
    sets = {s: SpeechCommands(synth_root, s, "sc10") for s in ("train", "val", "test")}
    assert sets["val"].files == sorted(p for p in val if p.split("/")[0] in kw)
    assert sets["test"].files == sorted(p for p in test if p.split("/")[0] in kw)
    every = sorted(f"{w}/{p.name}" for w in SC10_WORDS for p in (synth_root / w).glob("*.wav"))
    assert sets["train"].files == sorted(set(every) - set(val) - set(test))
    assert sorted(sets["train"].files + sets["val"].files + sets["test"].files) == every
    assert len(sets["train"]) == 10 * (FIXTURE_PER_WORD - 2)
    for s in sets.values():
        assert s.labels == list(SC10_WORDS)


def test_loader_items(synth_root: Path) -> None:
    ds = SpeechCommands(synth_root, "val", "sc10")
    ds8 = SpeechCommands(synth_root, "val", "sc10", rate=2)
    for i in range(len(ds)):
        x, y = ds[i]
        assert x.shape == (16000, 1) and x.dtype == torch.float32
        assert isinstance(y, int) and ds.labels[y] == ds.files[i].split("/")[0]
        raw = read_wav(synth_root / ds.files[i])
        assert torch.equal(x[: len(raw), 0], torch.from_numpy(raw.astype(np.float32) / 32768))
        assert torch.all(x[len(raw) :] == 0)
        x8, y8 = ds8[i]
        assert x8.shape == (8000, 1) and y8 == y
        assert torch.equal(x8, x[::2])


def test_normalizer(synth_root: Path) -> None:
    train = SpeechCommands(synth_root, "train", "sc10")
    mean, std = compute_normalizer(train)
    assert abs(mean) < 1e-2 and 1e-3 < std < 1
    xs = torch.cat([x for x, _ in SpeechCommands(synth_root, "train", "sc10", (mean, std))])
    assert abs(xs.double().mean().item()) < 1e-4
    assert abs(xs.double().std().item() - 1) < 1e-3
    sub = torch.utils.data.Subset(train, [0, 3, 5])
    generic = [train[i] for i in (0, 3, 5)]  # a plain list of (x, y): the generic path
    assert np.allclose(compute_normalizer(sub), compute_normalizer(generic), rtol=1e-6)
    val = SpeechCommands(synth_root, "val", "sc10", (mean, std))
    assert torch.allclose(val[0][0], (SpeechCommands(synth_root, "val", "sc10")[0][0] - mean) / std)


def test_augmentation(synth_root: Path) -> None:
    plain = SpeechCommands(synth_root, "train", "sc10")
    aug = SpeechCommands(synth_root, "train", "sc10", augment=True, noise_prob=1.0)
    aug.set_epoch(0)
    a0 = [aug[i][0] for i in range(4)]
    a0_again = [aug[i][0] for i in range(4)]
    aug.set_epoch(1)
    a1 = [aug[i][0] for i in range(4)]
    for i in range(4):
        assert a0[i].shape == (16000, 1)
        assert not torch.equal(a0[i], plain[i][0])
        assert torch.equal(a0[i], a0_again[i])  # reproducible given (seed, epoch, index)
        assert not torch.equal(a0[i], a1[i])
        assert aug[i][1] == plain[i][1]
    shift_only = SpeechCommands(synth_root, "train", "sc10", augment=True, noise_prob=0.0)
    torch.manual_seed(0)
    x = shift_only[0][0]
    assert x.shape == (16000, 1) and not torch.equal(x, plain[0][0])
    with pytest.raises(ValueError, match="train split only"):
        SpeechCommands(synth_root, "val", "sc10", augment=True)


# ---------------------------------------------------------------------------- stream


def test_step_labels_rule() -> None:
    # clip A (class 2) ends at 10, clip B (non-keyword, 5) ends at 14, clip C (1) at 22
    y = make_step_labels(24, [(10, 2), (14, 5), (22, 1)], tail=3, hold=2, silence=5)
    expected = [5] * 7 + [2] * 5 + [5] * 7 + [1] * 5
    assert y.tolist() == expected and y.dtype == np.int64
    # overlap: the later clip wins; spans are clipped at both ends
    y = make_step_labels(8, [(1, 0), (5, 3), (6, 4), (9, 2)], tail=2, hold=2, silence=9)
    assert y.tolist() == [0, 0, 0, 3, 4, 4, 4, 2]
    # a negative tail delays the span: [end + 2, end + 4)
    y = make_step_labels(12, [(3, 1), (10, 2)], tail=-2, hold=4, silence=7)
    assert y.tolist() == [7] * 5 + [1, 1] + [7] * 5


def test_speech_end() -> None:
    x = np.zeros(16000, np.float32)
    x[2000:6000] = 0.5 * np.sin(np.arange(4000) * 0.3)
    x += 1e-4 * np.random.default_rng(0).standard_normal(16000).astype(np.float32)
    assert speech_end(x) == 6080  # end of the 10 ms block [5920, 6080) holding sample 5999
    assert speech_end(np.zeros(16000)) == 16000 and speech_end(x[:100]) == 100


def test_speech_stream_speech_end(synth_root: Path) -> None:
    ss = SpeechStream(synth_root, "val", "sc10", length=32000, num_items=3, clip_end="speech")
    ss.set_epoch(0)
    for i in range(3):
        x, y, events = ss.compose(i)
        for end, cls in events:
            if cls != 10 and ss.tail <= end < 32000 - ss.hold:
                assert y[end - 1] == cls
                assert np.abs(x[end : end + 1600]).max() < np.abs(x[end - 1600 : end]).max()
    with pytest.raises(ValueError, match="clip_end"):
        SpeechStream(synth_root, "val", "sc10", clip_end="middle")
    with pytest.raises(ValueError, match="label_tail_ms"):  # an empty label span
        SpeechStream(synth_root, "val", "sc10", label_tail_ms=-100, label_hold_ms=100)


def test_speech_stream(synth_root: Path) -> None:
    norm = compute_normalizer(SpeechCommands(synth_root, "train", "sc10"))
    ss = SpeechStream(synth_root, "train", "sc10", length=32000, num_items=6, normalizer=norm)
    assert ss.labels == [*SC10_WORDS, "_silence_"] and ss.silence == 10
    assert len(ss.other_files) == 2 * (FIXTURE_PER_WORD - 2)  # marvin, sheila
    ss.set_epoch(0)
    seen = set()
    for i in range(len(ss)):
        x, y = ss[i]
        assert x.shape == (32000, 1) and x.dtype == torch.float32
        assert y.shape == (32000,) and y.dtype == torch.int64
        assert 0 <= int(y.min()) and int(y.max()) <= 10
        seen |= set(y.tolist())
        xr, yr, events = ss.compose(i)
        assert np.array_equal(yr, y.numpy())
        assert np.array_equal(make_step_labels(32000, events, ss.tail, ss.hold, 10), yr)
        assert events[0][0] > 0 and events[-1][0] - 16000 < 32000 + ss.gap[1]
    assert 10 in seen and len(seen) > 2
    ss8 = SpeechStream(synth_root, "train", "sc10", length=32000, num_items=2, rate=2)
    ss8.set_epoch(0)
    ss.set_epoch(0)
    x8, y8 = ss8[1]
    assert x8.shape == (16000, 1) and y8.shape == (16000,)
    assert torch.equal(y8, ss[1][1][::2])


# ---------------------------------------------------------------------------- bad input


def test_missing_root(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="root not found"):
        SpeechCommands(tmp_path / "nope", "train")


@pytest.mark.parametrize("name", ["validation_list.txt", "testing_list.txt"])
def test_missing_list(tmp_path: Path, name: str) -> None:
    root = tiny_root(tmp_path / "r")
    (root / name).unlink()
    with pytest.raises(FileNotFoundError, match=name):
        SpeechCommands(root, "train", "sc10")


def test_partial_dataset(tmp_path: Path) -> None:
    root = tiny_root(tmp_path / "r")
    shutil.rmtree(root / "stop")
    with pytest.raises(ValueError, match=r"partial.*1 of 10 words: stop"):
        SpeechCommands(root, "train", "sc10")
    with pytest.raises(ValueError, match=r"partial.*26 of 35 words: backward"):
        SpeechCommands(root, "train", "sc35")


def test_listed_file_missing(tmp_path: Path) -> None:
    root = tiny_root(tmp_path / "r")
    (root / "yes" / "00000000_nohash_0.wav").unlink()
    with pytest.raises(FileNotFoundError, match="validation_list.txt are missing"):
        SpeechCommands(root, "val", "sc10")


def _item_error(root: Path, rel: str):
    ds = SpeechCommands(root, "train", "sc10")
    with pytest.raises(ValueError) as info:
        ds[ds.files.index(rel)]
    assert rel in str(info.value)
    return str(info.value)


def test_truncated_wav(tmp_path: Path) -> None:
    root = tiny_root(tmp_path / "r")
    p = root / "go" / "00000002_nohash_0.wav"
    p.write_bytes(p.read_bytes()[:5000])  # cut mid-data
    assert "truncated" in _item_error(root, "go/00000002_nohash_0.wav")
    p.write_bytes(b"RIFF\x00\x00")  # cut inside the header
    assert "unreadable WAV" in _item_error(root, "go/00000002_nohash_0.wav")


def test_wrong_rate_and_channels(tmp_path: Path) -> None:
    root = tiny_root(tmp_path / "r")
    write_wav(root / "up" / "00000002_nohash_0.wav", np.zeros(8000, np.int16), rate=8000)
    msg = _item_error(root, "up/00000002_nohash_0.wav")
    assert "8000 Hz" in msg and "16000" in msg
    with wave.open(str(root / "no" / "00000002_nohash_0.wav"), "wb") as w:
        w.setnchannels(2)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(np.zeros(2 * 1000, "<i2").tobytes())
    assert "2 channels" in _item_error(root, "no/00000002_nohash_0.wav")
    with wave.open(str(root / "on" / "00000002_nohash_0.wav"), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(1)
        w.setframerate(16000)
        w.writeframes(bytes(1000))
    assert "8-bit" in _item_error(root, "on/00000002_nohash_0.wav")
    write_wav(root / "off" / "00000002_nohash_0.wav", np.zeros(16001, np.int16))
    assert "longer than" in _item_error(root, "off/00000002_nohash_0.wav")


def test_augment_needs_noise(tmp_path: Path) -> None:
    root = tiny_root(tmp_path / "r")
    shutil.rmtree(root / "_background_noise_")
    with pytest.raises(FileNotFoundError, match="_background_noise_"):
        SpeechCommands(root, "train", "sc10", augment=True)
    ds = SpeechCommands(root, "train", "sc10", augment=True, noise_prob=0.0)
    assert ds[0][0].shape == (16000, 1)
