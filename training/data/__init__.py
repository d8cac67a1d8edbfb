"""Datasets: Speech Commands v0.02 (real layout) and its synthetic generator.

Heavy pieces load lazily: ``speech`` imports torch, ``speech_synth`` does not.
"""

from .speech import (
    SC10_WORDS,
    SC35_WORDS,
    SpeechCommands,
    SpeechStream,
    compute_normalizer,
    make_step_labels,
    read_wav,
    speech_end,
)
from .speech_synth import default_synth_root, ensure_synth, generate_speech_synth

__all__ = [
    "SC10_WORDS",
    "SC35_WORDS",
    "SpeechCommands",
    "SpeechStream",
    "compute_normalizer",
    "default_synth_root",
    "ensure_synth",
    "generate_speech_synth",
    "make_step_labels",
    "read_wav",
    "speech_end",
]
