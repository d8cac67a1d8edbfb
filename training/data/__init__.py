"""Datasets: Speech Commands v0.02 (real layout), its synthetic generator and the labelled
keyword-spotting streams built from it (``kws_stream``); the toy task's tone bursts
(``tones``); BIDMC vital signs (PhysioNet WFDB / Monash .ts loaders, simulator, NeuroKit2
baseline); Long Range Arena (ListOps and Pathfinder generators + loaders, IMDB / AAN
byte-level text) and the image sequences (CIFAR-10 python batches, Fashion-MNIST IDX).

Names load lazily: ``speech`` imports torch, ``speech_synth`` does not, so the CLI's
``data`` commands and ``liquid-stream --help`` stay torch-free.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "SC10_WORDS": "speech",
    "SC35_WORDS": "speech",
    "SpeechCommands": "speech",
    "SpeechStream": "speech",
    "compute_normalizer": "speech",
    "make_step_labels": "speech",
    "read_wav": "speech",
    "speech_end": "speech",
    "default_synth_root": "speech_synth",
    "ensure_synth": "speech_synth",
    "generate_speech_synth": "speech_synth",
    "build_kws_stream": "kws_stream",
    "write_kws_stream": "kws_stream",
    "tone_bursts": "tones",
    "BidmcDataError": "bidmc",
    "load_wfdb_windows": "bidmc",
    "load_ts_windows": "bidmc",
    "split_windows": "bidmc",
    "ensure_bidmc_sim": "bidmc_sim",
    "write_bidmc_sim": "bidmc_sim",
    "baseline_estimates": "bidmc_baseline",
    "ListOpsDataError": "listops",
    "ensure_listops": "listops",
    "PathfinderDataError": "pathfinder",
    "ensure_pathfinder": "pathfinder",
    "TextDataError": "lra_text",
    "read_imdb": "lra_text",
    "read_aan": "lra_text",
    "ImageDataError": "images",
    "read_cifar10": "images",
    "read_fashion_mnist": "images",
    "SequenceImageDataset": "images",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
