"""Small Speech Commands v0.02 fixtures for tests (shared with the trainer's tests).

``synth_fixture(path)`` runs the real synthetic generator (espeak-ng + flite) on a few
words; ``tiny_root(path)`` writes a TTS-free root of tone bursts for error-path tests.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from liquid_stream.training.data.speech.speech import SC10_WORDS
from liquid_stream.training.data.speech.speech_synth import generate_speech_synth, write_wav

# SC10 plus two non-keywords (for SpeechStream on sc10).
FIXTURE_WORDS = (*SC10_WORDS, "marvin", "sheila")
FIXTURE_PER_WORD = 4
FIXTURE_SPEAKERS = 20


def synth_fixture(path: str | Path, workers: int = 2):
    """Generate FIXTURE_WORDS × FIXTURE_PER_WORD clips from 20 speakers (16/2/2 by split)."""
    return generate_speech_synth(
        path,
        FIXTURE_PER_WORD,
        words=FIXTURE_WORDS,
        seed=0,
        workers=workers,
        n_speakers=FIXTURE_SPEAKERS,
        noise_seconds=2.0,
        progress=False,
    )


def tiny_root(path: str | Path, words=SC10_WORDS, per_word: int = 3) -> Path:
    """A valid v0.02 root of 0.5 s tones: clip 0 of each word in val, clip 1 in test."""
    root = Path(path)
    val, test = [], []
    t = np.arange(8000) / 16000
    for i, w in enumerate(words):
        (root / w).mkdir(parents=True)
        for n in range(per_word):
            x = 0.3 * np.sin(2 * np.pi * (200 + 50 * i + 10 * n) * t)
            write_wav(root / w / f"{n:08x}_nohash_0.wav", np.round(x * 32767).astype(np.int16))
        val.append(f"{w}/{0:08x}_nohash_0.wav")
        test.append(f"{w}/{1:08x}_nohash_0.wav")
    (root / "validation_list.txt").write_text("\n".join(val) + "\n")
    (root / "testing_list.txt").write_text("\n".join(test) + "\n")
    (root / "_background_noise_").mkdir()
    rng = np.random.default_rng(0)
    write_wav(
        root / "_background_noise_" / "white_noise.wav",
        np.round(rng.uniform(-0.5, 0.5, 32000) * 32767).astype(np.int16),
    )
    return root
