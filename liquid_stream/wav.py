"""WAV files, read and written in one place (numpy only: no torch, no third-party audio).

Two readers, for two contracts:

- :func:`read_wav` — any RIFF/WAVE file a user may hand an app: PCM 8/16/24/32-bit,
  IEEE float 32/64, WAVE_FORMAT_EXTENSIBLE, any rate, any channel count. Returns float32
  mono in [-1, 1] (channel 0 of a multichannel file, with a note to show), the rate and
  the notes. The file is parsed here (not with :mod:`wave`), so a missing file, a non-WAV
  file or a truncated WAV (fewer data bytes than the header says) each get a clear
  :class:`WavError` naming the file.
- :func:`read_pcm16` — a dataset clip that must be exactly 16-bit PCM mono (at ``rate``
  and at most ``max_samples`` long, when given): returns its int16 samples as stored, so
  a training pipeline sees the bytes of the file. ``FileNotFoundError`` for a missing
  file, :class:`WavError` for anything else, each naming the file.

Two writers, both 16-bit PCM mono: :func:`write_wav` takes float samples in [-1, 1]
(clipped; scaled by 32768 and rounded), :func:`write_pcm16` int16 samples written as they
are (anything else is a ``TypeError``: no silent conversion of a dataset's samples).

:class:`WavError` is a ``ValueError``: callers that caught ``ValueError`` still do.
"""

from __future__ import annotations

import os
import struct
import wave
from pathlib import Path

import numpy as np


class WavError(ValueError):
    """A WAV file that cannot be used (the message names the file and the cause)."""


# ------------------------------------------------------------------------------ read

_PCM, _FLOAT, _EXTENSIBLE = 0x0001, 0x0003, 0xFFFE


def read_wav(path: str | os.PathLike) -> tuple[np.ndarray, int, list[str]]:
    """Read a WAV file as float32 mono in [-1, 1]: ``(samples, rate, notes)``.

    ``notes`` lists what was changed (e.g. "3 channels: using channel 0"). Raises
    :class:`WavError` for a missing or unreadable file, a file that is not RIFF/WAVE,
    an unsupported encoding, or a truncated data chunk.
    """
    path = Path(path)
    if not path.exists():
        raise WavError(f"audio file not found: {path}")
    if not path.is_file():
        raise WavError(f"not a file: {path}")
    try:
        data = path.read_bytes()
    except OSError as e:
        raise WavError(f"cannot read {path}: {e}") from e
    if len(data) < 12 or data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        raise WavError(f"{path} is not a WAV file (no RIFF/WAVE header)")
    fmt = None
    pos = 12
    while pos + 8 <= len(data):
        cid, size = data[pos : pos + 4], struct.unpack("<I", data[pos + 4 : pos + 8])[0]
        body = pos + 8
        if cid == b"fmt ":
            if size < 16 or body + 16 > len(data):
                raise WavError(f"{path}: truncated WAV (fmt chunk cut short)")
            tag, ch, rate, _, _, bits = struct.unpack("<HHIIHH", data[body : body + 16])
            if tag == _EXTENSIBLE and size >= 40 and body + 26 <= len(data):
                tag = struct.unpack("<H", data[body + 24 : body + 26])[0]  # sub-format GUID
            fmt = (tag, ch, rate, bits)
        elif cid == b"data":
            if fmt is None:
                raise WavError(f"{path}: malformed WAV (data chunk before fmt chunk)")
            raw = data[body : body + size]
            if len(raw) < size:
                raise WavError(
                    f"{path}: truncated WAV (header says {size} data bytes, file holds {len(raw)})"
                )
            return _decode(path, raw, *fmt)
        pos = body + size + (size & 1)
    if fmt is None:
        raise WavError(f"{path}: truncated or malformed WAV (no fmt chunk)")
    raise WavError(f"{path}: truncated or malformed WAV (no data chunk)")


def _decode(path: Path, raw: bytes, tag: int, ch: int, rate: int, bits: int):
    if ch < 1 or rate < 1:
        raise WavError(f"{path}: malformed WAV ({ch} channels, {rate} Hz)")
    width = bits // 8
    if tag == _PCM and bits in (8, 16, 24, 32):
        n = len(raw) // (width * ch)
        raw = raw[: n * width * ch]
        if bits == 8:
            x = (np.frombuffer(raw, np.uint8).astype(np.float32) - 128.0) / 128.0
        elif bits == 24:
            b = np.frombuffer(raw, np.uint8).reshape(-1, 3).astype(np.int32)
            v = b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16)
            x = (np.where(v >= 1 << 23, v - (1 << 24), v) / float(1 << 23)).astype(np.float32)
        else:
            x = np.frombuffer(raw, f"<i{width}").astype(np.float32) / float(1 << (bits - 1))
    elif tag == _FLOAT and bits in (32, 64):
        n = len(raw) // (width * ch)
        x = np.frombuffer(raw[: n * width * ch], f"<f{width}").astype(np.float32)
    else:
        kind = {_PCM: "PCM", _FLOAT: "float"}.get(tag, f"format tag 0x{tag:04x}")
        raise WavError(
            f"{path}: unsupported WAV encoding ({kind}, {bits}-bit); use 8/16/24/32-bit PCM "
            "or 32/64-bit float"
        )
    notes = []
    x = x.reshape(-1, ch)
    if ch > 1:
        notes.append(f"{path.name}: {ch} channels, using channel 0")
    return np.ascontiguousarray(x[:, 0]), int(rate), notes


def read_pcm16(
    path: str | os.PathLike, rate: int | None = None, max_samples: int | None = None
) -> np.ndarray:
    """Read a mono 16-bit PCM WAV as int16, with errors that name the file.

    Raises ``FileNotFoundError`` if it is missing, :class:`WavError` if it is unreadable,
    truncated (fewer data bytes than its header says), not at ``rate`` Hz (when given),
    not mono, not 16-bit, or longer than ``max_samples`` (when given).
    """
    path = str(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"WAV file not found: {path}")
    try:
        with wave.open(path, "rb") as w:
            got, ch, width, n = w.getframerate(), w.getnchannels(), w.getsampwidth(), w.getnframes()
            if rate is not None and got != rate:
                raise WavError(f"{path}: sample rate {got} Hz, expected {rate} Hz")
            if ch != 1:
                raise WavError(f"{path}: {ch} channels, expected mono (1 channel)")
            if width != 2:
                raise WavError(f"{path}: {8 * width}-bit samples, expected 16-bit PCM")
            raw = w.readframes(n)
    except (wave.Error, EOFError) as e:
        raise WavError(f"{path}: unreadable WAV ({e})") from e
    if len(raw) < 2 * n:
        raise WavError(
            f"{path}: truncated WAV (header says {n} samples, file holds {len(raw) // 2})"
        )
    if max_samples is not None and n > max_samples:
        raise WavError(f"{path}: {n} samples ({n / got:.3f} s), longer than {max_samples}")
    return np.frombuffer(raw, dtype="<i2").astype(np.int16)


# ----------------------------------------------------------------------------- write


def write_pcm16(path: str | os.PathLike, x: np.ndarray, rate: int) -> None:
    """Write int16 samples as they are as a 16-bit PCM mono WAV."""
    x = np.asarray(x)
    if x.dtype != np.int16:
        raise TypeError(f"write_wav expects int16 samples, got {x.dtype}")
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(int(rate))
        w.writeframes(x.astype("<i2").tobytes())


def write_wav(path: str | os.PathLike, x: np.ndarray, rate: int) -> None:
    """Write float samples in [-1, 1] (clipped) as a 16-bit PCM mono WAV."""
    pcm = np.round(np.clip(np.asarray(x, np.float64), -1.0, 32767 / 32768) * 32768)
    write_pcm16(path, pcm.astype(np.int16), rate)
