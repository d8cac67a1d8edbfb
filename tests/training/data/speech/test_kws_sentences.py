"""Near misses for keyword spotting (issue 63): the phonetic neighbour finder
(training/data/speech/phonetic.py, `liquid-stream data kws-neighbours`) and the sentence mode of
`liquid-stream data kws-stream` (training/data/speech/kws_stream.py).

The neighbour tests need pocketsphinx's CMU dictionary (``pip install pocketsphinx``, the
``peer`` extra) and the sentence tests espeak-ng (the Debian package): each skips with a
reason where its tool is absent. The sentence labels are checked against the audio: with
no noise bed, the keyword's labelled span holds exactly the keyword as espeak-ng says it
alone with the sentence's voice, and nothing outside the labelled pieces is sound.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from click.testing import CliRunner

from liquid_stream.io.labels import read_label_csv
from liquid_stream.io.wav import read_wav
from liquid_stream.training.data.cli import kws_neighbours_cmd, kws_stream_cmd
from liquid_stream.training.data.speech import phonetic
from liquid_stream.training.data.speech.kws_stream import (
    SR,
    build_kws_stream,
    sentence_stream,
    speech_span,
    write_kws_stream,
)

needs_dict = pytest.mark.skipif(
    not phonetic.dict_available(),
    reason="pocketsphinx's CMU dictionary not installed (pip install pocketsphinx)",
)
needs_espeak = pytest.mark.skipif(
    shutil.which("espeak-ng") is None,
    reason="espeak-ng not installed (apt-get install espeak-ng)",
)


def run_cli(cmd, args):
    return CliRunner().invoke(cmd, [str(a) for a in args])


# ------------------------------------------------------------------------ neighbours

KNOWN_NEAR = {  # keyword -> words that must be among its 20 nearest (50 for pound)
    "down": ("town", "dawn"),
    "on": ("an", "in"),
    "yes": ("yet", "chess"),
    "right": ("light", "bright"),
    "no": ("go", "nose"),
}
KNOWN_HOMOPHONES = {"right": ("write", "rite"), "no": ("know",)}
SC10 = ("yes", "no", "up", "down", "left", "right", "on", "off", "stop", "go")


def test_phone_distance_weights_similar_phones_less():
    d = phonetic.phone_distance
    assert d(("D", "AW", "N"), ("D", "AW", "N")) == 0
    # a voiced / voiceless pair < a different manner and place < a vowel for a consonant
    assert d(["D"], ["T"]) < d(["D"], ["F"]) < d(["D"], ["AA"])
    assert d(["IY"], ["IH"]) < d(["IY"], ["AA"])  # near vowels < far vowels
    assert d(["M"], ["N"]) < d(["M"], ["S"])  # two nasals
    assert d(("R", "AY", "T"), ("L", "AY", "T")) < d(("R", "AY", "T"), ("S", "AY", "T"))
    # symmetric (the costs depend on context, so it is not a metric: no triangle test)
    words = [
        ("D", "AW", "N"),
        ("T", "AW", "N"),
        ("P", "AW", "N", "D"),
        ("D", "AO", "N"),
        ("S", "T", "AA", "P"),
        ("N", "OW", "Z"),
        (),
    ]
    for a in words:
        for b in words:
            assert d(a, b) == pytest.approx(d(b, a))
            assert (d(a, b) == 0) == (a == b)
    # the contexts: a final stop after its nasal, a final consonant after a vowel, h
    assert d(("D", "AW", "N"), ("D", "AW", "N", "D")) < d(("D", "AW", "N"), ("D", "AW", "N", "K"))
    assert d(("N", "OW"), ("N", "OW", "Z")) < d(("N", "OW"), ("Z", "N", "OW"))
    assert d(("AE", "T"), ("HH", "AE", "T")) < d(("AE", "T"), ("K", "AE", "T"))
    with pytest.raises(ValueError, match="unknown phone"):
        d(["D"], ["XX"])


@pytest.mark.slow
@needs_dict
@pytest.mark.parametrize("word", sorted(KNOWN_NEAR))
def test_known_neighbours_come_out_near(word):
    near = [w for w, _ in phonetic.neighbours(word, k=20)]
    for expected in KNOWN_NEAR[word]:
        assert expected in near, (word, expected, near)
    dist = dict(phonetic.neighbours(word, k=20))
    assert all(0 < v < 1.5 for v in dist.values())


@needs_dict
def test_pound_is_a_neighbour_of_down_and_far_words_are_far():
    near = dict(phonetic.neighbours("down", k=50))
    assert "pound" in near and near["town"] < near["pound"]
    far = phonetic.phone_distance(
        phonetic.pronunciations("down")[0], phonetic.pronunciations("cheese")[0]
    )
    assert far > max(near.values())


@pytest.mark.slow
@needs_dict
@pytest.mark.parametrize("word", SC10)
def test_homophones_and_inflections_are_never_negatives(word):
    mine = set(phonetic.pronunciations(word))
    same = phonetic.homophones(word)
    for h in KNOWN_HOMOPHONES.get(word, ()):
        assert h in same
    found = phonetic.find_neighbours(word, k=300, min_log10_freq=None)
    assert len(found) == 300
    for n in found:
        assert n.word != word and n.word not in same, n
        assert not mine.intersection(phonetic.pronunciations(n.word)), n  # no identical phones
        assert n.distance > 0
        assert n.word not in {word + "s", word + "'s", word + "ed", word + "ing"}, n
    if word == "stop":
        assert not {"stops", "stopped", "stopping"} & {n.word for n in found}
    if word == "go":
        assert not {"goes", "going", "gone"} & {n.word for n in found}
    if word == "no":  # nor the homophone's inflections
        assert "knows" not in {n.word for n in found}


@needs_dict
def test_kws_neighbours_cli_prints_neighbours_and_flags_homophones():
    r = run_cli(kws_neighbours_cmd, ["--keywords", "right,no", "--k", "20"])
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    at = {ln.split()[0]: i for i, ln in enumerate(lines) if not ln.startswith(" ")}
    right = lines[at["right"] : at["right"] + 3]
    assert "R AY T" in right[0]
    assert "write" in right[1].split(":", 1)[1]  # a homophone ...
    neigh = right[2].split(":", 1)[1]
    assert "light" in neigh and "write" not in neigh  # ... never a neighbour
    no = lines[at["no"] : at["no"] + 3]
    assert "know" in no[1] and "know " not in no[2] and " go " in no[2]
    assert len(neigh.split(",")) == 20
    r = run_cli(kws_neighbours_cmd, ["--keywords", "qzxqzx"])
    assert r.exit_code == 1 and "not in the pronouncing dictionary" in r.output


def test_missing_dictionary_is_a_one_line_error_with_the_install_command(monkeypatch):
    monkeypatch.delenv("LIQUID_STREAM_CMUDICT", raising=False)
    monkeypatch.setattr(phonetic, "_package_dir", lambda: None)
    assert not phonetic.dict_available()
    with pytest.raises(phonetic.PhoneticDictMissing, match="pip install"):
        phonetic.neighbours("yes")
    r = run_cli(kws_neighbours_cmd, ["--keywords", "yes"])
    assert r.exit_code == 1
    assert r.output.count("\n") == 1 and "pip install" in r.output and "peer" in r.output


def test_parse_cmudict_merges_variants_and_drops_stress():
    text = ";;; comment\nread R EH1 D\nread(2) R IY1 D  # note\nbad X Y\nA AH0\n"
    assert phonetic.parse_cmudict(text) == {
        "read": [("R", "EH", "D"), ("R", "IY", "D")],
        "a": [("AH",)],
    }


# ------------------------------------------------------------------------ sentences


def _espeak_alone(plan, text):
    """``text`` as espeak-ng says it alone with the plan's voice, trimmed (the reference)."""
    from liquid_stream.training.data.speech.speech_synth import (
        ClipJob,
        _resample,
        _tts,
        trim_silence,
    )

    job = ClipJob(
        "ref", text, plan.voice, plan.speed_jitter, plan.pitch_jitter, 1.0, 0.0, -120.0, 0
    )
    return trim_silence(_resample(*_tts(job, 1.0)))


@pytest.fixture(scope="module")
def sentences():
    if shutil.which("espeak-ng") is None:
        pytest.skip("espeak-ng not installed (apt-get install espeak-ng)")
    if not phonetic.dict_available():
        pytest.skip("pocketsphinx's CMU dictionary not installed (pip install pocketsphinx)")
    return sentence_stream(
        0.4,
        ["yes", "no", "stop", "down"],
        seed=3,
        near_miss_prob=0.5,
        noise_gain=0.0,
        engines=["espeak-ng"],
        n_voices=6,
    )


@pytest.mark.slow
@needs_espeak
@needs_dict
def test_sentence_labels_sit_on_the_keyword_audio(sentences):
    s = sentences
    x = s.x.astype(np.float64)
    kinds = [p.plan.near_miss for p in s.sentences]
    assert len(s.sentences) >= 4 and True in kinds and False in kinds, kinds
    assert len(s.rows) == sum(len(p.spans) for p in s.sentences)
    covered = np.zeros(len(x), bool)
    rows = iter(s.rows)
    for placed in s.sentences:
        plan = placed.plan
        for j, (a, b) in enumerate(placed.spans):
            row = next(rows)
            assert (round(row.start_s * SR), round(row.end_s * SR)) == (a, b)
            assert row.word == plan.pieces[j]
            assert row.is_keyword == (j == plan.slot and not plan.near_miss)
            covered[a:b] = True
        a, b = placed.spans[plan.slot]
        word = plan.pieces[plan.slot]
        # the labelled span is the slot's word said alone by the same voice: same length
        # (up to the 10 ms blocks of speech_span), correlation ~1 at the labelled place
        ref = _espeak_alone(plan, word)
        r0, r1 = speech_span(ref)
        ref = ref[r0:r1]
        assert abs((b - a) - len(ref)) <= 160, (word, b - a, len(ref))
        n = min(len(ref), b - a)
        seg = x[a : a + n]
        corr = float(seg @ ref[:n] / (np.linalg.norm(seg) * np.linalg.norm(ref[:n]) + 1e-12))
        assert corr > 0.98, (plan.text, word, corr)
        # its energy is inside the span: the 10 ms blocks at both ends are speech, and
        # the 30 ms before and after the span are silent (pauses, noise gain 0)
        e = np.sqrt(np.mean(seg[: n // 160 * 160].reshape(-1, 160) ** 2, 1))
        assert e.max() > 0.05 * plan.peak
        assert not x[max(0, a - 480) : a].any() or j == 0
        assert np.abs(x[b : b + 480]).max() < 1e-3 * plan.peak + 2 / 32768
    # everything that sounds is labelled: nothing but silence outside the rows (gain 0;
    # speech_span's -40 dB cut leaves only faint tails outside)
    assert np.abs(x[~covered]).max() < 0.011


@needs_espeak
@needs_dict
def test_near_miss_sentences_carry_no_keyword_label(sentences):
    s = sentences
    keywords = {"yes", "no", "stop", "down"}
    banned = set(keywords)
    for k in keywords:
        banned |= set(phonetic.homophones(k))
    for placed in s.sentences:
        plan = placed.plan
        t0, t1 = placed.spans[0][0] / SR, placed.spans[-1][1] / SR
        inside = [r for r in s.rows if t0 <= r.start_s and r.end_s <= t1]
        slot_word = plan.pieces[plan.slot]
        if plan.near_miss:
            assert not any(r.is_keyword for r in inside), plan
            assert slot_word in s.neighbours[plan.keyword] and slot_word not in banned
            assert slot_word in dict(phonetic.neighbours(plan.keyword, k=40))
        else:
            assert [r.word for r in inside if r.is_keyword] == [plan.keyword]
            assert slot_word == plan.keyword
        # no carrier word is a keyword or a keyword's homophone
        carriers = [w for j, p in enumerate(plan.pieces) if j != plan.slot for w in p.split()]
        assert not banned.intersection(w.lower() for w in carriers), plan


@pytest.mark.slow
@needs_espeak
@needs_dict
def test_kws_stream_sentences_cli_writes_the_stream_format(tmp_path, sentences):
    out, csv = tmp_path / "s.wav", tmp_path / "s.csv"
    opts = "--mode sentences --minutes 0.4 --seed 3 --keywords yes,no,stop,down"
    args = [out, "--labels", csv, *opts.split(), "--engines", "espeak-ng", "--noise-gain", "0"]
    r = run_cli(kws_stream_cmd, args)
    assert r.exit_code == 0, r.output
    assert "near misses" in r.output
    x, rate, _ = read_wav(out)
    assert rate == SR and len(x) == round(0.4 * 60 * SR)
    rows = read_label_csv(csv)  # what kws-eval / kws-tune read
    assert {r.word for r in rows if r.is_keyword} <= {"yes", "no", "stop", "down"}
    assert any(r.is_keyword for r in rows) and any(not r.is_keyword for r in rows)
    # the same as the API with the same arguments (24 voices: the CLI default)
    s = sentence_stream(
        0.4, ["yes", "no", "stop", "down"], seed=3, noise_gain=0.0, engines=["espeak-ng"]
    )
    assert [(r.word, r.is_keyword) for r in rows] == [(r.word, r.is_keyword) for r in s.rows]
    assert [round(r.start_s, 6) for r in rows] == [round(r.start_s, 6) for r in s.rows]
    # with a noise bed: the same labels, sound between the sentences
    r = run_cli(kws_stream_cmd, args[:-1] + ["0.02"])
    assert r.exit_code == 0, r.output
    assert read_label_csv(csv) == rows
    y, _, _ = read_wav(out)
    assert 0 < np.abs(y[: int(0.9 * SR)]).max() <= 0.03
    # another split: other voices
    r = run_cli(kws_stream_cmd, args + ["--split", "validation"])
    assert r.exit_code == 0, r.output
    assert read_label_csv(csv) != rows


def test_sentence_only_options_need_sentence_mode(tmp_path):
    for extra in (["--engines", "espeak-ng"], ["--near-miss", "0.3"], ["--near-k", "5"]):
        r = run_cli(
            kws_stream_cmd,
            [tmp_path / "s.wav", "--labels", tmp_path / "s.csv", "--data", tmp_path, *extra],
        )
        assert r.exit_code == 2 and "needs --mode sentences" in r.output, r.output
    r = run_cli(
        kws_stream_cmd,
        [tmp_path / "s.wav", "--labels", tmp_path / "s.csv", "--mode", "sentences", "--distinct"],
    )
    assert r.exit_code == 2 and "--distinct" in r.output
    assert not (tmp_path / "s.wav").exists()


@needs_espeak
def test_sentences_without_the_dictionary(tmp_path, monkeypatch):
    """No pocketsphinx: near-miss sentences are refused with the install line; with
    --near-miss 0 the keyword sentences still build."""
    monkeypatch.delenv("LIQUID_STREAM_CMUDICT", raising=False)
    monkeypatch.setattr(phonetic, "_package_dir", lambda: None)
    out, csv = tmp_path / "s.wav", tmp_path / "s.csv"
    base = [
        out,
        "--labels",
        csv,
        "--mode",
        "sentences",
        "--minutes",
        "0.1",
        "--keywords",
        "yes,go",
        "--engines",
        "espeak-ng",
    ]
    r = run_cli(kws_stream_cmd, base)
    assert r.exit_code == 1 and "pip install" in r.output and not out.exists()
    r = run_cli(kws_stream_cmd, base + ["--near-miss", "0"])
    assert r.exit_code == 0, r.output
    rows = read_label_csv(csv)
    kw = [r for r in rows if r.is_keyword]
    assert kw and {r.word for r in kw} <= {"yes", "go"}
    assert {r.word for r in rows if not r.is_keyword}.isdisjoint({"yes", "go"})


def test_clip_mode_unchanged_by_the_sentence_options(tmp_path):
    """The default (and --mode clips) is the clip stream of build_kws_stream, byte for
    byte."""
    from fixtures_speech import tiny_root

    root = tiny_root(tmp_path / "sc", words=("yes", "no", "up", "marvin"))
    outs = []
    for extra in ([], ["--mode", "clips"]):
        out, csv = tmp_path / f"s{len(outs)}.wav", tmp_path / f"s{len(outs)}.csv"
        r = run_cli(
            kws_stream_cmd,
            [
                out,
                "--labels",
                csv,
                "--data",
                root,
                "--minutes",
                "0.2",
                "--keywords",
                "yes,no",
                "--seed",
                "4",
                *extra,
            ],
        )
        assert r.exit_code == 0, r.output
        outs.append((out.read_bytes(), csv.read_bytes()))
    x, rows = build_kws_stream(root, 0.2, ["yes", "no"], 4)
    write_kws_stream(tmp_path / "api.wav", tmp_path / "api.csv", x, rows)
    api = ((tmp_path / "api.wav").read_bytes(), (tmp_path / "api.csv").read_bytes())
    assert outs[0] == outs[1] == api
