"""Labelled streams: the true events of a long audio stream and their CSV file (no torch).

    start_s,end_s,word,is_keyword
    1.234000,1.789000,yes,1

One row per spoken word: ``[start_s, end_s]`` is the word's speech in seconds of the
stream, ``is_keyword`` (0/1) whether the word is one of the keywords. The data tools write
it (``liquid-stream data kws-stream``, :mod:`liquid_stream.training.data.speech.kws_stream`); the
keyword-spotting app reads it (``kws-eval``, ``kws-tune``). It lives in the core so that
both layers share one definition.
"""

from __future__ import annotations

import csv
import os
from dataclasses import dataclass
from pathlib import Path

LABEL_COLUMNS = ("start_s", "end_s", "word", "is_keyword")


@dataclass(frozen=True)
class TrueEvent:
    """A spoken word of a labelled stream: ``[start_s, end_s]`` (end = end of speech)."""

    start_s: float
    end_s: float
    word: str
    is_keyword: bool


def write_label_csv(path: str | os.PathLike, rows: list[TrueEvent]) -> None:
    """Write ``rows`` as ``start_s,end_s,word,is_keyword`` (times to the microsecond)."""
    lines = [",".join(LABEL_COLUMNS)]
    lines += [f"{r.start_s:.6f},{r.end_s:.6f},{r.word},{int(r.is_keyword)}" for r in rows]
    Path(path).write_text("\n".join(lines) + "\n")


def read_label_csv(path: str | os.PathLike) -> list[TrueEvent]:
    """Read ``start_s,end_s,word,is_keyword`` rows (header required) into events."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"labels file not found: {path}")
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        if reader.fieldnames is None or any(c not in reader.fieldnames for c in LABEL_COLUMNS):
            raise ValueError(f"{path}: expected a CSV with columns {','.join(LABEL_COLUMNS)}")
        out = []
        for i, row in enumerate(reader, start=2):
            try:
                flag = row["is_keyword"].strip().lower() in ("1", "true", "yes")
                ev = TrueEvent(float(row["start_s"]), float(row["end_s"]), row["word"], flag)
            except (TypeError, ValueError) as e:
                raise ValueError(f"{path}:{i}: bad row {row} ({e})") from e
            if ev.end_s < ev.start_s:
                raise ValueError(f"{path}:{i}: end_s before start_s")
            out.append(ev)
    return out
