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
    an unsupported encoding, or a truncated data chunk. The whole file is in memory:
    a long recording is read in blocks with :class:`WavReader` instead.
    """
    with WavReader(path) as r:
        return r.read(r.frames), r.rate, list(r.notes)


class WavReader:
    """A WAV file read in blocks: memory bounded by the block, not the file's length.

        with WavReader("day.wav") as r:        # header checked here (WavError)
            while len(x := r.read(16000)):      # float32 mono blocks in [-1, 1]
                ...

    Opening parses the chunks (without reading the samples) and refuses, with the
    messages of :func:`read_wav`, a missing or unreadable file, a file that is not
    RIFF/WAVE, a data chunk longer than the file holds (truncated), an unsupported
    encoding; so a bad file is refused before anything is processed. :meth:`read`
    decodes the next frames exactly as :func:`read_wav` decodes them (it is built on
    this reader): channel 0, PCM 8/16/24/32-bit scaled to [-1, 1], float as stored.

    Attributes: ``rate`` (Hz), ``channels`` (in the file), ``frames`` (samples per
    channel), ``notes`` (what is changed: "3 channels, using channel 0"), ``position``
    (frames read so far).
    """

    def __init__(self, path: str | os.PathLike):
        self.path = path = Path(path)
        if not path.exists():
            raise WavError(f"audio file not found: {path}")
        if not path.is_file():
            raise WavError(f"not a file: {path}")
        try:
            self._f = open(path, "rb")  # noqa: SIM115 - closed by close() / __exit__
        except OSError as e:
            raise WavError(f"cannot read {path}: {e}") from e
        try:
            self._parse()
        except BaseException:
            self._f.close()
            raise
        self.position = 0

    def _parse(self) -> None:
        path, f = self.path, self._f
        try:
            size = os.fstat(f.fileno()).st_size
            head = f.read(12)
        except OSError as e:
            raise WavError(f"cannot read {path}: {e}") from e
        if len(head) < 12 or head[:4] != b"RIFF" or head[8:12] != b"WAVE":
            raise WavError(f"{path} is not a WAV file (no RIFF/WAVE header)")
        fmt = None
        pos = 12
        while pos + 8 <= size:
            f.seek(pos)
            hdr = f.read(8)
            cid, n = hdr[:4], struct.unpack("<I", hdr[4:8])[0]
            body = pos + 8
            if cid == b"fmt ":
                if n < 16 or body + 16 > size:
                    raise WavError(f"{path}: truncated WAV (fmt chunk cut short)")
                raw = f.read(min(n, 26, size - body))
                tag, ch, rate, _, _, bits = struct.unpack("<HHIIHH", raw[:16])
                if tag == _EXTENSIBLE and n >= 40 and len(raw) >= 26:
                    tag = struct.unpack("<H", raw[24:26])[0]  # sub-format GUID
                fmt = (tag, ch, rate, bits)
            elif cid == b"data":
                if fmt is None:
                    raise WavError(f"{path}: malformed WAV (data chunk before fmt chunk)")
                held = min(n, size - body)
                if held < n:
                    raise WavError(
                        f"{path}: truncated WAV (header says {n} data bytes, file holds {held})"
                    )
                self._setup(body, n, *fmt)
                return
            pos = body + n + (n & 1)
        if fmt is None:
            raise WavError(f"{path}: truncated or malformed WAV (no fmt chunk)")
        raise WavError(f"{path}: truncated or malformed WAV (no data chunk)")

    def _setup(self, start: int, nbytes: int, tag: int, ch: int, rate: int, bits: int) -> None:
        path = self.path
        if ch < 1 or rate < 1:
            raise WavError(f"{path}: malformed WAV ({ch} channels, {rate} Hz)")
        if not ((tag == _PCM and bits in (8, 16, 24, 32)) or (tag == _FLOAT and bits in (32, 64))):
            kind = {_PCM: "PCM", _FLOAT: "float"}.get(tag, f"format tag 0x{tag:04x}")
            raise WavError(
                f"{path}: unsupported WAV encoding ({kind}, {bits}-bit); use 8/16/24/32-bit PCM "
                "or 32/64-bit float"
            )
        self._tag, self._bits, self._width = tag, bits, bits // 8
        self.channels, self.rate = int(ch), int(rate)
        self._frame = self._width * self.channels  # bytes per frame
        self.frames = nbytes // self._frame  # a partial last frame is left out
        self._start = start
        self.notes = [f"{path.name}: {ch} channels, using channel 0"] if ch > 1 else []

    def read(self, frames: int) -> np.ndarray:
        """The next ``frames`` samples of channel 0 (fewer at the end; none after it) as
        float32 in [-1, 1]. WavError if the file shrank since it was opened."""
        n = max(0, min(int(frames), self.frames - self.position))
        if n == 0:
            return np.zeros(0, np.float32)
        try:
            self._f.seek(self._start + self.position * self._frame)
            raw = self._f.read(n * self._frame)
        except OSError as e:
            raise WavError(f"cannot read {self.path}: {e}") from e
        if len(raw) < n * self._frame:
            raise WavError(f"{self.path}: truncated WAV (the file ended while it was read)")
        self.position += n
        return _decode(raw, self._tag, self.channels, self._bits)

    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> WavReader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _decode(raw: bytes, tag: int, ch: int, bits: int) -> np.ndarray:
    """Whole frames ``raw`` of a checked encoding -> channel 0 as float32 in [-1, 1]."""
    width = bits // 8
    if tag == _PCM and bits == 8:
        x = (np.frombuffer(raw, np.uint8).astype(np.float32) - 128.0) / 128.0
    elif tag == _PCM and bits == 24:
        b = np.frombuffer(raw, np.uint8).reshape(-1, 3).astype(np.int32)
        v = b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16)
        x = (np.where(v >= 1 << 23, v - (1 << 24), v) / float(1 << 23)).astype(np.float32)
    elif tag == _PCM:
        x = np.frombuffer(raw, f"<i{width}").astype(np.float32) / float(1 << (bits - 1))
    else:
        x = np.frombuffer(raw, f"<f{width}").astype(np.float32)
    return np.ascontiguousarray(x.reshape(-1, ch)[:, 0])


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
