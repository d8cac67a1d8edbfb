"""Datasets, one sub-package per domain:

- ``speech/``: Speech Commands v0.02 (real layout), its synthetic generator and the
  labelled keyword-spotting streams built from it (``kws_stream``), the augmentations;
- ``vitals/``: BIDMC vital signs (PhysioNet WFDB / Monash .ts loaders, simulators,
  NeuroKit2 baseline, crops, the real-recordings yardstick);
- ``lra/``: Long Range Arena (ListOps and Pathfinder generators + loaders, IMDB / AAN
  byte-level text) and the image sequences (CIFAR-10 python batches, Fashion-MNIST IDX);
- here: the toy task's tone bursts (``tones``), the dataset cache (``cache``) and the
  ``data`` commands (``cli``).

Names load lazily (``speech.speech`` imports torch), so the CLI's ``data`` commands and
``liquid-stream --help`` stay torch-free.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "SC10_WORDS": "speech.speech",
    "SC35_WORDS": "speech.speech",
    "SpeechCommands": "speech.speech",
    "SpeechStream": "speech.speech",
    "compute_normalizer": "speech.speech",
    "make_step_labels": "speech.speech",
    "read_wav": "speech.speech",
    "speech_end": "speech.speech",
    "default_synth_root": "speech.speech_synth",
    "ensure_synth": "speech.speech_synth",
    "generate_speech_synth": "speech.speech_synth",
    "build_kws_stream": "speech.kws_stream",
    "write_kws_stream": "speech.kws_stream",
    "tone_bursts": "tones",
    "BidmcDataError": "vitals.bidmc",
    "load_wfdb_windows": "vitals.bidmc",
    "load_ts_windows": "vitals.bidmc",
    "split_windows": "vitals.bidmc",
    "ensure_bidmc_sim": "vitals.bidmc_sim",
    "write_bidmc_sim": "vitals.bidmc_sim",
    "baseline_estimates": "vitals.bidmc_baseline",
    "ListOpsDataError": "lra.listops",
    "ensure_listops": "lra.listops",
    "PathfinderDataError": "lra.pathfinder",
    "ensure_pathfinder": "lra.pathfinder",
    "TextDataError": "lra.lra_text",
    "read_imdb": "lra.lra_text",
    "read_aan": "lra.lra_text",
    "ImageDataError": "lra.images",
    "read_cifar10": "lra.images",
    "read_fashion_mnist": "lra.images",
    "SequenceImageDataset": "lra.images",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
