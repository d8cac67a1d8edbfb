"""Audio sources for the live apps: WAV files and microphones, streamed in blocks (no torch).

    src = WavSource("talk.wav", block_ms=10, realtime=False)   # or MicSource(device="pulse")
    with src:
        for block in src.blocks():                # float32 mono blocks at src.rate
            ...

- :func:`read_wav` / :func:`write_wav` are those of :mod:`liquid_stream.io.wav` (RIFF/WAVE
  PCM 8/16/24/32-bit, IEEE float 32/64, WAVE_FORMAT_EXTENSIBLE), with a missing file, a
  non-WAV file or a truncated WAV each raised as a clear :class:`AudioError`.
  Multichannel files are reduced to channel 0 (the caller gets a note to show).
- :class:`WavSource` yields a file in blocks, paced to real time (as a microphone would)
  or as fast as the consumer takes them (``realtime=False``). It reads the file as it
  goes (:class:`liquid_stream.io.wav.WavReader`, a slab of at most ``READ_FRAMES`` frames at
  a time), so its memory does not grow with the file's length (a day-long recording
  streams in a few MB); a bad header or a truncated file is still refused when the
  source is opened, before any block.
- :class:`MicSource` wraps ``sounddevice.InputStream``; its callback only copies the block
  into a bounded queue. A full queue drops the block (counted in ``dropped``); PortAudio's
  ``input_overflow`` flags are counted in ``overflows``; neither ever raises.
  ``blocks(drain=True)`` joins a backlog into one block (a late consumer catches up at
  once).
- :func:`stream_resampler` converts between integer rates with the streaming-exact
  polyphase FIR of :mod:`liquid_stream.apps.common.resample` (feeding blocks of any size gives
  exactly the output of one call on the whole signal). It is causal, so it delays the
  signal by ``delay_s`` (the filter's half length, ~1 ms for 16 → 8 kHz). Any pair of
  integer rates works (11025 → 8000 uses up = 320, down = 441).
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from liquid_stream.io import wav
from liquid_stream.io.wav import write_wav

from .resample import StreamResampler

__all__ = ["AudioError", "MicSource", "WavSource", "read_wav", "stream_resampler", "write_wav"]

READ_FRAMES = 1 << 16  # frames a WavSource reads from its file at a time (~4 s at 16 kHz)


class AudioError(ValueError):
    """A WAV file or an audio device that cannot be used (message names the cause)."""


# ------------------------------------------------------------------------------ WAV


def read_wav(path: str | os.PathLike) -> tuple[np.ndarray, int, list[str]]:
    """:func:`liquid_stream.io.wav.read_wav` (float32 mono in [-1, 1]: ``(samples, rate,
    notes)``), its errors raised as :class:`AudioError` with the same message."""
    try:
        return wav.read_wav(path)
    except wav.WavError as e:
        raise AudioError(str(e)) from None


# ------------------------------------------------------------------------- resampling


def stream_resampler(in_rate: float, out_rate: float) -> StreamResampler:
    """A :class:`~liquid_stream.apps.common.resample.StreamResampler` ``in_rate → out_rate`` for
    1-D audio blocks (float32 in, float32 out); :class:`AudioError` unless both rates are
    positive integers."""
    if int(in_rate) != in_rate or int(out_rate) != out_rate or in_rate < 1 or out_rate < 1:
        raise AudioError(f"resampling needs positive integer rates, got {in_rate} → {out_rate}")
    return StreamResampler(int(in_rate), int(out_rate))


# ---------------------------------------------------------------------------- sources


class WavSource:
    """A WAV file as a stream of float32 mono blocks of ``block_ms`` at ``rate``.

    ``realtime=True`` sleeps so blocks come at the pace of a live microphone;
    ``realtime=False`` yields them as fast as they are consumed. ``stop()`` ends it early.
    The file is opened and its header checked here (:class:`AudioError`); the samples
    are read in slabs as :meth:`blocks` goes (module docstring), decoded exactly as
    :func:`read_wav` decodes them. :attr:`samples` reads the whole file (a plot of it);
    streaming never touches it.
    """

    kind = "file"

    def __init__(self, path: str | os.PathLike, block_ms: float = 10.0, realtime: bool = True):
        self.path = Path(path)
        try:
            with wav.WavReader(self.path) as r:  # header and length checked now
                self.rate, self.n_samples, self.notes = r.rate, r.frames, list(r.notes)
        except wav.WavError as e:
            raise AudioError(str(e)) from None
        self.block = max(1, int(round(self.rate * block_ms / 1000)))
        self.realtime = realtime
        self.dropped = 0
        self.overflows = 0
        self.name = str(self.path)
        self._stop = threading.Event()
        self._samples: np.ndarray | None = None

    @property
    def duration_s(self) -> float:
        return self.n_samples / self.rate

    @property
    def samples(self) -> np.ndarray:
        """The whole file as float32 mono (read on first use, then kept)."""
        if self._samples is None:
            self._samples = read_wav(self.path)[0]
        return self._samples

    def __enter__(self) -> WavSource:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()

    def blocks(self) -> Iterator[np.ndarray]:
        """The file's blocks of ``block`` samples (the last one shorter), read as they go;
        :class:`AudioError` if the file can no longer be read (it shrank meanwhile)."""
        t0 = time.perf_counter()
        slab = max(self.block, READ_FRAMES // self.block * self.block)  # whole blocks
        try:
            reader = wav.WavReader(self.path)
        except wav.WavError as e:
            raise AudioError(str(e)) from None
        with reader:
            pos = 0
            while pos < self.n_samples:
                try:
                    x = reader.read(min(slab, self.n_samples - pos))
                except wav.WavError as e:
                    raise AudioError(str(e)) from None
                if not len(x):
                    return
                for a in range(0, len(x), self.block):
                    if self._stop.is_set():
                        return
                    if self.realtime:
                        wait = t0 + (pos + a) / self.rate - time.perf_counter()
                        if wait > 0 and self._stop.wait(wait):
                            return
                    yield x[a : a + self.block]
                pos += len(x)


class MicSource:
    """A sounddevice input as a stream of float32 mono blocks (channel 0) at ``rate``.

    ``device``: a PortAudio index or (part of) a device name, None for the default input.
    The stream opens at ``prefer_rate`` when the device accepts it, else at the device's
    default rate (the caller resamples). The PortAudio callback only copies the block into
    a queue of ``max_queue`` blocks: when the consumer falls behind, new blocks are
    dropped and counted (``dropped``); PortAudio overflow flags are counted in
    ``overflows``.
    """

    kind = "mic"

    def __init__(
        self,
        device: int | str | None = None,
        prefer_rate: int | None = None,
        block_ms: float = 10.0,
        max_queue: int = 200,
    ):
        import sounddevice as sd

        self._sd = sd
        try:
            info = sd.query_devices(device, "input")
        except (ValueError, sd.PortAudioError) as e:
            names = [
                f"{i}: {d['name']}"
                for i, d in enumerate(sd.query_devices())
                if d["max_input_channels"] > 0
            ]
            avail = "; ".join(names) if names else "none"
            raise AudioError(f"no usable input device {device!r} ({e}); inputs: {avail}") from e
        self.name = str(info["name"])
        self.device = device
        rate = None
        if prefer_rate:
            try:
                sd.check_input_settings(device=device, channels=1, samplerate=prefer_rate)
                rate = int(prefer_rate)
            except Exception:  # noqa: BLE001 - PortAudio reports unsupported rates variously
                rate = None
        self.rate = rate or int(round(info["default_samplerate"]))
        self.block = max(1, int(round(self.rate * block_ms / 1000)))
        self.queue: queue.Queue[np.ndarray] = queue.Queue(maxsize=max_queue)
        self.dropped = 0
        self.overflows = 0
        self.notes: list[str] = []
        self.first_block_at: float | None = None
        self._stop = threading.Event()
        self._stream = None

    def _callback(self, indata, frames, time_info, status) -> None:  # PortAudio thread
        if status.input_overflow:
            self.overflows += 1
        try:
            self.queue.put_nowait(indata[:, 0].copy())
        except queue.Full:
            self.dropped += 1

    def __enter__(self) -> MicSource:
        sd = self._sd
        try:
            self._stream = sd.InputStream(
                device=self.device,
                channels=1,
                samplerate=self.rate,
                blocksize=self.block,
                dtype="float32",
                callback=self._callback,
            )
            self._stream.start()
        except (sd.PortAudioError, ValueError) as e:
            raise AudioError(
                f"cannot open input device {self.name!r} at {self.rate} Hz: {e}"
            ) from e
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
        if self._stream is not None:
            try:
                self._stream.stop()
                self._stream.close()
            except self._sd.PortAudioError:
                pass
            self._stream = None

    def stop(self) -> None:
        self._stop.set()

    def wait_first_block(self, timeout: float = 5.0) -> bool:
        """Block until the device delivered its first block (True) or ``timeout`` s."""
        end = time.monotonic() + timeout
        while self.queue.empty() and self.first_block_at is None:
            if time.monotonic() > end or self._stop.is_set():
                return False
            time.sleep(0.01)
        return True

    def blocks(self, drain: bool = False) -> Iterator[np.ndarray]:
        """The device's blocks as they arrive. ``drain``: each block joined with every
        block already queued behind it (a consumer that fell behind catches up in one
        step instead of one step a block; while it keeps up, one block at a time)."""
        while not self._stop.is_set():
            try:
                block = self.queue.get(timeout=0.1)
            except queue.Empty:
                continue
            if self.first_block_at is None:
                self.first_block_at = time.time()
            if drain and not self.queue.empty():
                more = [block]
                try:
                    while True:
                        more.append(self.queue.get_nowait())
                except queue.Empty:
                    pass
                block = np.concatenate(more)
            yield block
