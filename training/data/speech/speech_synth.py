"""Synthetic Speech Commands: the v0.02 words spoken by synthetic speakers.

Writes exactly the Speech Commands v0.02 layout::

    OUT/<word>/<speakerhash>_nohash_<n>.wav   16 kHz mono int16, exactly 1 s
    OUT/validation_list.txt, OUT/testing_list.txt
    OUT/_background_noise_/{white,pink,brown}_noise.wav
    OUT/.synth-stamp.json                      what was generated (per_word, seed, ...)

Speakers are voice configurations of four text-to-speech engines (about
52.5 / 11.25 / 11.25 / 25 % of the speakers): ``espeak-ng`` (8 English accents × 54 voice
variants × speed × pitch), ``flite`` (kal, kal16, awb, rms, slt × duration stretch × mean
F0), ``festival`` (kal_diphone, ked_diphone × stretch × mean F0; cmu_us_slt_arctic_hts ×
stretch), festival run once per speaker batch (its start-up is ~0.4 s), and ``piper``, a
neural (VITS) voice (training/data/speech/piper_voice.py: the CC0 en_US "joe" voice on
onnxruntime, loaded once per worker process) made into many speakers by its prosody
(length / noise / duration-noise scales) and a waveform pitch shift (-4..+6 semitones) and
formant shift (vocal-tract length). The first three are Debian programs and required; piper
is a Python extra (``.[piper]``, installed by ``make install``) and optional: where it is
missing it is left out with one printed note and its share goes to the other engines.
``engines=`` (CLI ``--engines``) picks a subset, e.g. a train set without one engine and a
test set with only it; the stamp records the engines used. A speaker's id is
8 hex characters of the SHA-1 of its configuration. Speakers are split into
train / validation / test (about 80/10/10, stratified by engine) *before* any clip is
assigned, so no speaker crosses splits, and every word has clips in every split (for
``per_word >= 3``). Each utterance gets a small speed/pitch jitter (repeats of a
word by one speaker differ), a random level, a random position inside the 1 s
clip and a faint noise floor.

Everything is a pure function of ``seed``: the plan (speakers, assignments,
jitter, offsets) is drawn in the parent process, and the worker processes only
render clips, so the output does not depend on the number of workers.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
import wave
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from math import gcd
from pathlib import Path

import numpy as np

from liquid_stream.io.wav import write_pcm16

from .. import cache
from . import piper_voice
from .speech import SC35_WORDS, SR

SYNTH_VERSION = 1  # the cache folder name (speech-synth-v1)
# Bumped whenever the same (per_word, seed) would give different audio or lists, so
# ensure_synth regenerates a stale cache. 2: festival speakers, engine-stratified split.
# 3: piper (neural) speakers, engine shares, the engine set in the stamp.
GENERATOR_REVISION = 3
STAMP_NAME = ".synth-stamp.json"
NOISE_DIR = "_background_noise_"

ESPEAK_ACCENTS = (
    "en-us",
    "en-gb",
    "en-gb-scotland",
    "en-gb-x-gbclan",
    "en-gb-x-rp",
    "en-gb-x-gbcwmd",
    "en-029",
    "en-us-nyc",
)
# Human-sounding variants of espeak-ng (robot, whisper and croak voices left out).
ESPEAK_VARIANTS = (
    "m1",
    "m2",
    "m3",
    "m4",
    "m5",
    "m6",
    "m7",
    "m8",
    "f1",
    "f2",
    "f3",
    "f4",
    "f5",
    "Alex",
    "Andy",
    "Annie",
    "Denis",
    "Gene",
    "Jacky",
    "Lee",
    "Mario",
    "Michael",
    "Mike",
    "Storm",
    "Tweaky",
    "adam",
    "anika",
    "aunty",
    "belinda",
    "benjamin",
    "boris",
    "caleb",
    "david",
    "ed",
    "edward",
    "grandma",
    "grandpa",
    "iven",
    "john",
    "klatt",
    "klatt2",
    "klatt3",
    "linda",
    "max",
    "michel",
    "norbert",
    "paul",
    "quincy",
    "rob",
    "robert",
    "steph",
    "travis",
    "victor",
    "zac",
)
FLITE_VOICES = ("kal", "kal16", "awb", "rms", "slt")
# festival voice -> (Debian package, voice directory under /usr/share/festival/voices)
FESTIVAL_VOICES = {
    "kal_diphone": ("festvox-kallpc16k", "english/kal_diphone"),
    "ked_diphone": ("festvox-kdlpc16k", "english/ked_diphone"),
    "cmu_us_slt_arctic_hts": ("festvox-us-slt-hts", "us/cmu_us_slt_arctic_hts"),
}
FESTIVAL_VOICE_ROOT = Path("/usr/share/festival/voices")
# The engines, in their canonical order, and their fractions of the speakers. A subset
# (engines=...) shares the speakers in the same proportions: without piper, 70/15/15 %.
ENGINES = ("espeak-ng", "flite", "festival", "piper")
ENGINE_SHARES = {"espeak-ng": 0.525, "flite": 0.1125, "festival": 0.1125, "piper": 0.25}
# Engines that are left out (with a note) where missing, instead of stopping the generator.
OPTIONAL_ENGINES = ("piper",)
# piper speakers: ranges of the waveform pitch shift (semitones) and of the formant shift
# around 0.35 x the pitch shift (semitones; > 0: a shorter vocal tract)
PIPER_PITCH_ST = (-4.0, 6.0)
PIPER_FORMANT_ST = (-2.5, 3.0)

APT_PACKAGES = {"espeak-ng": "espeak-ng", "flite": "flite", "festival": "festival"}
MIN_PER_WORD = 3  # clips per word that give every split (train / val / test) one or more


class SynthToolMissing(RuntimeError):
    """A text-to-speech program the generator needs is not installed."""


class EmptySplitWarning(UserWarning):
    """``per_word`` is too small to give every split a clip of every word."""


def empty_splits(per_word: int) -> list[str]:
    """The splits that get no clip of a word when each word has ``per_word`` clips."""
    counts = split_counts(per_word) if per_word >= MIN_PER_WORD else (per_word, 0, 0)
    return [s for s, n in zip(("train", "val", "test"), counts, strict=True) if n == 0]


def per_word_warning(per_word: int) -> str | None:
    """The warning for a ``per_word`` that leaves a split empty (None when all are filled)."""
    empty = empty_splits(per_word)
    if not empty:
        return None
    return (
        f"--per-word {per_word} is too small to fill every split (needs >= {MIN_PER_WORD}): "
        f"the {' and '.join(empty)} split{'s' if len(empty) > 1 else ''} will have no clips, "
        "and `liquid-stream train` refuses a set with an empty split"
    )


@dataclass(frozen=True)
class Voice:
    """One synthetic speaker: an engine and its voice settings."""

    engine: str  # "espeak-ng" | "flite" | "festival" | "piper"
    voice: str  # espeak accent ("en-gb"), flite / festival voice ("slt"), piper "joe"
    variant: str = ""  # espeak variant ("m3"); "" for the others
    speed: float = 1.0  # espeak: words per minute; flite, festival, piper: duration stretch
    pitch: float = 50.0  # espeak: 0-99; flite, festival: mean F0 in Hz; piper: semitones
    formant: float = 0.0  # piper: formant shift in semitones
    noise_scale: float = 0.0  # piper: variance of the acoustic latent
    noise_w: float = 0.0  # piper: variance of the phoneme durations

    def key(self) -> str:
        """The configuration as text (its SHA-1 gives the speaker id)."""
        key = f"{self.engine}|{self.voice}|{self.variant}|{self.speed:g}|{self.pitch:g}"
        if (self.formant, self.noise_scale, self.noise_w) != (0.0, 0.0, 0.0):
            key += f"|{self.formant:g}|{self.noise_scale:g}|{self.noise_w:g}"
        return key

    @property
    def speaker_id(self) -> str:
        return hashlib.sha1(self.key().encode()).hexdigest()[:8]


@dataclass(frozen=True)
class ClipJob:
    """Everything needed to render one clip (drawn in the parent, so deterministic)."""

    relpath: str  # "<word>/<speaker>_nohash_<n>.wav"
    word: str
    voice: Voice
    speed_jitter: float  # multiplies the speed
    pitch_jitter: float  # added to the pitch (espeak units, Hz or semitones)
    peak: float  # peak level of the speech, fraction of full scale
    offset: float  # position of the speech in the free part of the 1 s, 0..1
    floor_db: float  # noise floor relative to full scale (dB)
    noise_seed: int


@dataclass
class SynthReport:
    root: str
    n_clips: int
    seconds: float
    clips_per_s: float
    speakers: dict[str, int] = field(default_factory=dict)  # split -> distinct speakers
    clips: dict[str, int] = field(default_factory=dict)  # split -> clips
    too_long: int = 0  # clips cut at 1 s even after speeding up
    engines: list[str] = field(default_factory=list)  # the engines the speakers come from


# ---------------------------------------------------------------------------- tools


def select_engines(engines: Iterable[str] | None = None) -> tuple[str, ...]:
    """``engines`` checked (known, at least one) in the canonical :data:`ENGINES` order,
    without repeats; None: all of them."""
    if engines is None:
        return ENGINES
    if isinstance(engines, str):
        engines = [e.strip() for e in engines.split(",") if e.strip()]
    chosen = set(engines)
    unknown = sorted(chosen - set(ENGINES))
    if unknown or not chosen:
        raise ValueError(
            f"unknown TTS engine(s) {', '.join(unknown) or '(none given)'}; "
            f"choose from {', '.join(ENGINES)}"
        )
    return tuple(e for e in ENGINES if e in chosen)


def optional_missing(engines: Iterable[str] | None = None) -> dict[str, str]:
    """``{engine: why it cannot run here}`` for the optional engines among ``engines``."""
    probes = {"piper": piper_voice.piper_missing}
    out = {}
    for e in select_engines(engines):
        why = probes[e]() if e in OPTIONAL_ENGINES else None
        if why is not None:
            out[e] = why
    return out


def available_engines(engines: Iterable[str] | None = None) -> tuple[str, ...]:
    """``engines`` (default: all) less the optional ones that cannot run here."""
    engines = select_engines(engines)
    skip = optional_missing(engines)
    return tuple(e for e in engines if e not in skip)


def check_tools(engines: Iterable[str] | None = None) -> dict[str, str]:
    """Raise :class:`SynthToolMissing` naming the apt package if a TTS program that one of
    ``engines`` (default: all) needs is missing. Optional engines (piper) do not raise:
    returns ``{engine: why it cannot run here}`` for those that are missing."""
    engines = select_engines(engines)
    missing = [prog for prog in APT_PACKAGES if prog in engines and shutil.which(prog) is None]
    pkgs = [APT_PACKAGES[p] for p in missing]
    voices = [
        v
        for v, (_, d) in FESTIVAL_VOICES.items()
        if "festival" in engines and not (FESTIVAL_VOICE_ROOT / d).is_dir()
    ]
    if voices:
        missing.append("festival voice(s) " + ", ".join(voices))
        pkgs += [FESTIVAL_VOICES[v][0] for v in voices]
    if missing:
        pkgs = " ".join(pkgs)
        raise SynthToolMissing(
            f"{', '.join(missing)} not found: the synthetic Speech Commands generator "
            f"needs the Debian package(s) {pkgs} "
            f"(install with: apt-get install -y --no-install-recommends {pkgs}, "
            "or run `make install` as root)."
        )
    return optional_missing(engines)


def usable_engines(engines: Iterable[str] | None = None, note: bool = True) -> tuple[str, ...]:
    """The engines to generate with: ``engines`` (default: all) after :func:`check_tools`,
    less the optional engines missing here, each named in one printed note (stderr) when
    ``note``. Raises :class:`SynthToolMissing` if none is left."""
    engines = select_engines(engines)
    skip = check_tools(engines)
    left = tuple(e for e in engines if e not in skip)
    if not left:
        raise SynthToolMissing("; ".join(f"{e}: {why}" for e, why in skip.items()))
    if note:
        for e, why in skip.items():
            print(
                f"note: TTS engine {e} skipped ({why}); its share of the speakers goes to "
                f"{', '.join(left)}",
                file=sys.stderr,
                flush=True,
            )
    return left


# ---------------------------------------------------------------------------- plan


def _rng(*keys: int | str) -> np.random.Generator:
    ints = [
        k if isinstance(k, int) else int.from_bytes(hashlib.sha1(k.encode()).digest()[:8], "little")
        for k in keys
    ]
    return np.random.default_rng(ints)


def make_speakers(n: int, seed: int, engines: Iterable[str] | None = None) -> list[Voice]:
    """``n`` distinct speakers (distinct ids) of ``engines`` (default: all, in the
    :data:`ENGINE_SHARES` proportions), deterministic in ``seed``."""
    engines = select_engines(engines)
    rng = _rng(seed, "speakers")
    # cumulative shares, festival / flite / piper first (with the three Debian engines this
    # draws the speakers of generator revision 2)
    order = [e for e in ("festival", "flite", "piper", "espeak-ng") if e in engines]
    total = sum(ENGINE_SHARES[e] for e in order)
    bounds = np.cumsum([ENGINE_SHARES[e] / total for e in order])
    out: list[Voice] = []
    seen: set[str] = set()
    while len(out) < n:
        u = rng.random()
        engine = order[min(int(np.searchsorted(bounds, u, side="right")), len(order) - 1)]
        if engine == "festival":
            name = str(rng.choice(list(FESTIVAL_VOICES)))
            v = Voice(
                "festival",
                name,
                "",
                round(float(rng.uniform(0.85, 1.25)), 2),
                0.0 if name.endswith("_hts") else float(rng.integers(80, 200)),
            )
        elif engine == "flite":
            v = Voice(
                "flite",
                str(rng.choice(FLITE_VOICES)),
                "",
                round(float(rng.uniform(0.85, 1.25)), 2),
                float(rng.integers(80, 200)),
            )
        elif engine == "piper":
            pitch = round(float(rng.uniform(*PIPER_PITCH_ST)), 1)
            formant = 0.35 * pitch + float(rng.uniform(-1.5, 1.5))
            v = Voice(
                "piper",
                piper_voice.VOICE_NAME,
                "",
                round(float(rng.uniform(0.85, 1.25)), 2),
                pitch,
                round(float(np.clip(formant, *PIPER_FORMANT_ST)), 1),
                round(float(rng.uniform(0.4, 0.9)), 2),
                round(float(rng.uniform(0.4, 1.1)), 2),
            )
        else:
            v = Voice(
                "espeak-ng",
                str(rng.choice(ESPEAK_ACCENTS)),
                str(rng.choice(ESPEAK_VARIANTS)),
                float(rng.integers(125, 200)),
                float(rng.integers(20, 80)),
            )
        if v.speaker_id not in seen:
            seen.add(v.speaker_id)
            out.append(v)
    return out


def split_counts(n: int, frac: float = 0.1) -> tuple[int, int, int]:
    """(train, val, test) sizes for ``n`` items: ~10 % / 10 %, at least 1 each when n >= 3."""
    k = max(1, round(n * frac)) if n >= 3 else 0
    return n - 2 * k, k, k


def split_speakers(speakers: Sequence[Voice], seed: int) -> dict[str, list[Voice]]:
    """Speaker-disjoint train/val/test pools (:func:`split_counts` sizes), stratified by
    engine: each of val and test gets each engine's share of its size (largest remainder),
    so every split hears every engine when there are enough speakers."""
    rng = _rng(seed, "speaker-split")
    groups: dict[str, list[Voice]] = {}
    for i in rng.permutation(len(speakers)):
        groups.setdefault(speakers[i].engine, []).append(speakers[i])
    _, k, _ = split_counts(len(speakers))
    exact = {e: k * len(g) / len(speakers) for e, g in sorted(groups.items())}
    quota = {e: int(q) for e, q in exact.items()}
    for e in sorted(exact, key=lambda e: (quota[e] - exact[e], e))[: k - sum(quota.values())]:
        quota[e] += 1
    pools: dict[str, list[Voice]] = {"train": [], "val": [], "test": []}
    for e, g in sorted(groups.items()):
        q = min(quota[e], len(g) // 2)
        pools["val"] += g[:q]
        pools["test"] += g[q : 2 * q]
        pools["train"] += g[2 * q :]
    for short in ("val", "test"):  # a quota clipped by a tiny engine group: top up
        while len(pools[short]) < k:
            pools[short].append(pools["train"].pop())
    return pools


def _pitch_jitter(voice: Voice, rng: np.random.Generator) -> float:
    """One utterance's pitch offset: ±4 espeak units, ±0.5 semitone (piper), ±8 Hz (flite,
    festival; 0 for a voice without an F0 setting)."""
    if voice.engine == "espeak-ng":
        return float(rng.uniform(-4, 4))
    if voice.engine == "piper":
        return float(rng.uniform(-0.5, 0.5))
    return float(rng.uniform(-8, 8)) * (voice.pitch > 0)


def plan_synth(
    per_word: int,
    words: Sequence[str] = SC35_WORDS,
    seed: int = 0,
    n_speakers: int | None = None,
    engines: Iterable[str] | None = None,
) -> tuple[list[ClipJob], dict[str, str]]:
    """Draw the generation plan: the clip jobs and the split of every speaker id.

    ``n_speakers`` defaults to ``max(10, 2 * per_word)``: each speaker says about half the
    words. Speakers are split first (80/10/10, stratified by engine); then each word's
    ``per_word`` clips are split 80/10/10 and each split's clips go to that split's
    speakers (without repeats while there are enough speakers, then ``_nohash_1``, ``_2``
    ... repeats). ``engines``: the engines the speakers come from (default: all of
    :data:`ENGINES`; the plan does not look at what is installed, see
    :func:`usable_engines`).
    """
    if per_word < 1:
        raise ValueError(f"per_word must be >= 1, got {per_word}")
    n_speakers = max(10, 2 * per_word) if n_speakers is None else n_speakers
    if n_speakers < 3:
        raise ValueError(f"need at least 3 speakers (one per split), got {n_speakers}")
    message = per_word_warning(per_word)
    if message:
        warnings.warn(message, EmptySplitWarning, stacklevel=2)
    speakers = make_speakers(n_speakers, seed, engines)
    pools = split_speakers(speakers, seed)
    split_of = {v.speaker_id: s for s, pool in pools.items() for v in pool}
    jobs: list[ClipJob] = []
    for word in words:
        rng = _rng(seed, "word", word)
        counts = dict(zip(("train", "val", "test"), split_counts(per_word), strict=True))
        if per_word < MIN_PER_WORD:
            counts = {"train": per_word, "val": 0, "test": 0}
        for split in ("train", "val", "test"):
            pool = pools[split]
            reps: dict[str, int] = {}
            perm = rng.permutation(len(pool))
            for j in range(counts[split]):
                voice = pool[perm[j % len(pool)]]
                n = reps.get(voice.speaker_id, 0)
                reps[voice.speaker_id] = n + 1
                jobs.append(
                    ClipJob(
                        relpath=f"{word}/{voice.speaker_id}_nohash_{n}.wav",
                        word=word,
                        voice=voice,
                        speed_jitter=float(rng.uniform(0.93, 1.07)),
                        pitch_jitter=_pitch_jitter(voice, rng),
                        peak=float(rng.uniform(0.15, 0.9)),
                        offset=float(rng.uniform(0.0, 1.0)),
                        floor_db=float(rng.uniform(-75, -50)),
                        noise_seed=int(rng.integers(2**31)),
                    )
                )
    return jobs, split_of


# ---------------------------------------------------------------------------- render


def _read_wav_bytes(data: bytes) -> tuple[np.ndarray, int]:
    with wave.open(io.BytesIO(data)) as w:
        rate, width, ch = w.getframerate(), w.getsampwidth(), w.getnchannels()
        raw = w.readframes(w.getnframes())  # espeak's stdout header claims ~2**30 frames
    if width != 2:
        raise RuntimeError(f"TTS produced {8 * width}-bit audio, expected 16-bit")
    x = np.frombuffer(raw[: len(raw) // (2 * ch) * 2 * ch], dtype="<i2").astype(np.float64)
    x = x.reshape(-1, ch).mean(axis=1) / 32768.0
    return x, rate


def _tts(job: ClipJob, speed_mult: float) -> tuple[np.ndarray, int]:
    v = job.voice
    if v.engine == "espeak-ng":
        speed = int(round(v.speed * job.speed_jitter * speed_mult))
        pitch = int(np.clip(round(v.pitch + job.pitch_jitter), 0, 99))
        cmd = ["espeak-ng", "-v", f"{v.voice}+{v.variant}", "-s", str(speed), "-p", str(pitch)]
        cmd += ["--stdout", job.word]
        res = subprocess.run(cmd, capture_output=True, check=True)
        return _read_wav_bytes(res.stdout)
    if v.engine == "flite":
        stretch = v.speed / (job.speed_jitter * speed_mult)
        f0 = max(50.0, v.pitch + job.pitch_jitter)
        with tempfile.NamedTemporaryFile(suffix=".wav") as tmp:
            cmd = ["flite", "-voice", v.voice, "--setf", f"duration_stretch={stretch:.3f}"]
            cmd += ["--setf", f"int_f0_target_mean={f0:.1f}", "-t", job.word, "-o", tmp.name]
            subprocess.run(cmd, capture_output=True, check=True)
            return _read_wav_bytes(Path(tmp.name).read_bytes())
    if v.engine == "festival":
        return _festival([job], speed_mult)[job.relpath]
    if v.engine == "piper":  # the voice is loaded once per (worker) process
        return piper_voice.render(
            job.word,
            length_scale=v.speed / (job.speed_jitter * speed_mult),
            noise_scale=v.noise_scale,
            noise_w=v.noise_w,
            pitch_st=v.pitch + job.pitch_jitter,
            formant_st=v.formant,
            seed=job.noise_seed,
        )
    raise ValueError(f"unknown TTS engine {v.engine!r}")


def _festival(jobs: Sequence[ClipJob], speed_mult: float) -> dict[str, tuple[np.ndarray, int]]:
    """Render jobs with festival in ONE process (start-up ~0.4 s): {relpath: (x, rate)}."""
    with tempfile.TemporaryDirectory() as tmp:
        lines = []
        for i, job in enumerate(jobs):
            v = job.voice
            lines.append(f"(voice_{v.voice})")
            stretch = v.speed / (job.speed_jitter * speed_mult)
            lines.append(f"(Parameter.set 'Duration_Stretch {stretch:.3f})")
            if v.pitch > 0:  # diphone voices: linear-regression F0 model
                f0 = max(50.0, v.pitch + job.pitch_jitter)
                lines.append(
                    f"(set! int_lr_params '((target_f0_mean {f0:.1f}) "
                    f"(target_f0_std {0.13 * f0:.1f}) (model_f0_mean 170) (model_f0_std 34)))"
                )
            lines.append(
                f'(utt.save.wave (utt.synth (Utterance Text "{job.word}")) "{tmp}/{i}.wav" \'riff)'
            )
        script = Path(tmp) / "run.scm"
        script.write_text("\n".join(lines) + "\n")
        subprocess.run(["festival", "-b", str(script)], capture_output=True, check=True)
        out = {}
        for i, job in enumerate(jobs):
            p = Path(tmp) / f"{i}.wav"
            if not p.is_file():
                raise RuntimeError(f"festival wrote no audio for {job.relpath} ({job.voice.key()})")
            out[job.relpath] = _read_wav_bytes(p.read_bytes())
    return out


def _resample(x: np.ndarray, rate: int) -> np.ndarray:
    if rate == SR:
        return x
    from scipy.signal import resample_poly

    g = gcd(SR, rate)
    return resample_poly(x, SR // g, rate // g)


def trim_silence(x: np.ndarray, rel_db: float = -40.0, frame: int = 160) -> np.ndarray:
    """Cut leading/trailing frames whose RMS is ``rel_db`` below the loudest frame."""
    n = len(x) // frame
    if n == 0:
        return x
    rms = np.sqrt(np.mean(x[: n * frame].reshape(n, frame) ** 2, axis=1))
    active = np.flatnonzero(rms > rms.max() * 10 ** (rel_db / 20))
    if len(active) == 0:
        return x[:0]
    return x[active[0] * frame : min(len(x), (active[-1] + 1) * frame)]


def render_clip(
    job: ClipJob, first: tuple[np.ndarray, int] | None = None
) -> tuple[np.ndarray, bool]:
    """Render one job to 16000 int16 samples. Returns (samples, cut_at_1s). ``first``:
    the TTS output at normal speed when already synthesised (festival batches)."""
    speech = np.zeros(0)
    for speed_mult in (1.0, 1.25, 1.5):  # speed up words that do not fit in 1 s
        x, rate = first if (speed_mult == 1.0 and first is not None) else _tts(job, speed_mult)
        speech = trim_silence(_resample(x, rate))
        if len(speech) <= SR - 320:
            break
    cut = len(speech) > SR
    speech = speech[:SR]
    if len(speech) == 0:
        raise RuntimeError(f"TTS produced silence for {job.relpath} ({job.voice.key()})")
    fade = min(80, len(speech) // 4)  # 5 ms fades: no clicks at the trim points
    if fade:
        ramp = np.linspace(0.0, 1.0, fade)
        speech = speech.copy()
        speech[:fade] *= ramp
        speech[-fade:] *= ramp[::-1]
    speech *= job.peak / max(np.abs(speech).max(), 1e-9)
    out = np.zeros(SR)
    start = int(round(job.offset * (SR - len(speech))))
    out[start : start + len(speech)] = speech
    out += 10 ** (job.floor_db / 20) * np.random.default_rng(job.noise_seed).standard_normal(SR)
    return np.clip(np.round(out * 32767), -32768, 32767).astype(np.int16), cut


def write_wav(path: str | os.PathLike, x: np.ndarray, rate: int = SR) -> None:
    """Write int16 mono WAV (:func:`liquid_stream.io.wav.write_pcm16`, 16 kHz by default)."""
    write_pcm16(path, x, rate)


def _render_batch(args: tuple[list[ClipJob], str]) -> list[bool]:
    """Render a batch of jobs into ``root``; festival jobs in one festival process."""
    jobs, root = args
    fest = [j for j in jobs if j.voice.engine == "festival"]
    first = _festival(fest, 1.0) if fest else {}
    cuts = []
    for job in jobs:
        x, cut = render_clip(job, first.get(job.relpath))
        write_wav(Path(root) / job.relpath, x)
        cuts.append(cut)
    return cuts


def _batches(jobs: Sequence[ClipJob], size: int = 8) -> list[list[ClipJob]]:
    """Work units: festival jobs grouped by speaker (one festival start-up per speaker,
    in chunks of up to 40), the other jobs in chunks of ``size``."""
    fest: dict[str, list[ClipJob]] = {}
    other = []
    for j in jobs:
        if j.voice.engine == "festival":
            fest.setdefault(j.voice.speaker_id, []).append(j)
        else:
            other.append(j)
    out = [g[i : i + 40] for g in fest.values() for i in range(0, len(g), 40)]
    out += [other[i : i + size] for i in range(0, len(other), size)]
    return out


# ---------------------------------------------------------------------------- noise


def colored_noise(kind: str, n: int, rng: np.random.Generator) -> np.ndarray:
    """White / pink (1/f) / brown (1/f²) noise, unit peak."""
    exponent = {"white": 0.0, "pink": 0.5, "brown": 1.0}[kind]
    spec = np.fft.rfft(rng.standard_normal(n))
    f = np.fft.rfftfreq(n, d=1.0 / SR)
    f[0] = f[1]
    spec /= f**exponent
    x = np.fft.irfft(spec, n)
    x -= x.mean()
    return x / np.abs(x).max()


def write_background_noise(root: Path, seconds: float, seed: int) -> list[str]:
    d = root / NOISE_DIR
    d.mkdir(parents=True, exist_ok=True)
    names = []
    for kind in ("white", "pink", "brown"):
        x = colored_noise(kind, int(seconds * SR), _rng(seed, "noise", kind)) * 0.5
        name = f"{kind}_noise.wav"
        write_wav(d / name, np.round(x * 32767).astype(np.int16))
        names.append(name)
    return names


# ---------------------------------------------------------------------------- driver


def generate_speech_synth(
    out: str | os.PathLike,
    per_word: int,
    *,
    words: Sequence[str] = SC35_WORDS,
    seed: int = 0,
    workers: int = 2,
    n_speakers: int | None = None,
    noise_seconds: float = 30.0,
    progress: bool = True,
    overwrite: bool = False,
    engines: Iterable[str] | None = None,
) -> SynthReport:
    """Generate the synthetic dataset into ``out`` (see the module docstring).

    ``engines``: the TTS engines of the speakers (default: all of :data:`ENGINES`); an
    optional engine that is not installed is left out with a note (:func:`usable_engines`).

    Renders into a temporary sibling folder and renames it into place at the end, so
    ``out`` is either complete (with its stamp file) or absent. An existing ``out`` is
    replaced only with ``overwrite=True`` and only if it is empty or a previous
    synthetic set (has the stamp file); anything else is refused.
    """
    engines = usable_engines(engines)
    out = Path(out).expanduser().resolve()
    cache.check_replaceable(out, STAMP_NAME, overwrite, "a synthetic Speech Commands folder")
    jobs, split_of = plan_synth(per_word, words, seed, n_speakers, engines)
    with cache.atomic_dir(out) as tmp:
        for w in words:
            (tmp / w).mkdir()
        t0 = time.perf_counter()
        args = [(b, str(tmp)) for b in _batches(jobs)]
        bar = dict(total=len(jobs), desc="speech-synth", unit="clip") if progress else None
        from scipy import signal  # noqa: F401  (imported once here, shared by forked workers)

        # one list of "cut" flags per batch
        cut = sum(map(sum, cache.map_jobs(_render_batch, args, workers, bar, advance=len)))
        seconds = time.perf_counter() - t0
        write_background_noise(tmp, noise_seconds, seed)
        lists: dict[str, list[str]] = {"train": [], "val": [], "test": []}
        for j in jobs:
            lists[split_of[j.voice.speaker_id]].append(j.relpath)
        (tmp / "validation_list.txt").write_text("".join(p + "\n" for p in sorted(lists["val"])))
        (tmp / "testing_list.txt").write_text("".join(p + "\n" for p in sorted(lists["test"])))
        report = SynthReport(
            root=str(out),
            n_clips=len(jobs),
            seconds=seconds,
            clips_per_s=len(jobs) / max(seconds, 1e-9),
            speakers={
                s: len({p.split("/")[1].split("_")[0] for p in ps}) for s, ps in lists.items()
            },
            clips={s: len(ps) for s, ps in lists.items()},
            too_long=cut,
            engines=list(engines),
        )
        stamp = {
            "version": SYNTH_VERSION,
            "revision": GENERATOR_REVISION,
            "per_word": per_word,
            "seed": seed,
            "n_speakers": n_speakers,
            "words": list(words),
            "noise_seconds": noise_seconds,
            "engines": list(engines),
        }
        cache.write_stamp(tmp, STAMP_NAME, stamp, report)
    return report


def default_synth_root() -> Path:
    """``$LIQUID_STREAM_CACHE/speech-synth-v1`` (default cache ``~/.cache/liquid-stream``)."""
    return cache.cache_dir() / f"speech-synth-v{SYNTH_VERSION}"


def ensure_synth(
    per_word: int,
    root: str | os.PathLike | None = None,
    *,
    seed: int = 0,
    workers: int = 2,
    progress: bool = True,
) -> Path:
    """Return a synthetic SC35 root with at least ``per_word`` clips per word, generating it
    if missing. A cached set made with a different seed, version, word list or engine set
    (all engines that can run here: a set made before piper was installed is remade), or
    with fewer clips per word, or by an older generator revision, is regenerated; a cached
    set with more clips per word is reused (generated atomically, under a file lock)."""
    root = Path(root).expanduser() if root is not None else default_synth_root()

    want = {
        "version": SYNTH_VERSION,
        "revision": GENERATOR_REVISION,
        "seed": seed,
        "words": list(SC35_WORDS),
        "n_speakers": None,
        "engines": list(available_engines()),
    }

    def usable() -> bool:
        st = cache.matching_stamp(root, STAMP_NAME, want)
        return st is not None and int(st.get("per_word", 0)) >= per_word

    return cache.ensure_built(
        root,
        usable,
        lambda: generate_speech_synth(
            root, per_word, seed=seed, workers=workers, progress=progress, overwrite=True
        ),
    )
