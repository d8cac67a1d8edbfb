"""Phonetic neighbours of keywords: the real English words nearest in phones.

    neighbours("down", k=3)   # [('town', 0.3), ('gown', 0.2), ('done', 0.39)]
    homophones("right")       # ['reit', 'rite', 'wright', 'write']

Pronunciations come from the CMU pronouncing dictionary bundled in the ``pocketsphinx``
wheel (``pocketsphinx/model/en-us/cmudict-en-us.dict``, 39 ARPAbet phones; stress digits,
where a dictionary has them, are dropped; ``$LIQUID_STREAM_CMUDICT`` names another file),
word frequencies from the unigrams of the language model beside it (``en-us.lm.bin``).
Install with ``pip install pocketsphinx`` (the ``peer`` extra); without it
:func:`cmudict_path` raises :class:`PhoneticDictMissing`, whose message is that one line.

The distance is a weighted phone edit distance (:func:`phone_distance`): substituting a
vowel for a vowel costs 0.25-0.9 by how far apart they are (height and backness at the
start and the end of the vowel, so diphthongs glide; rounding); a consonant for a
consonant 0.1-0.9 by voicing (0.25), place (0.07 a step, at most 0.25) and manner (stop /
fricative 0.35, stop / affricate 0.25, r / l 0.2, ...): d / t 0.35, two nasals 0.36-0.45; a vowel
for a consonant 1.3 (w / uw, y / iy, r / er less). Word-initial consonant substitutions
cost 0.85 times that (rhymes are near: ``down`` / ``town``), vowel substitutions between
two vowels before a nasal 0.7 times (nasalised vowels are less distinct: ``on`` / ``in``).
Inserting or deleting a phone costs 0.7 (a consonant) or 0.9 (a vowel: a syllable), less
where it is weak: h 0.45, a word-final consonant after a vowel 0.55 (``no`` / ``nose``),
a word-final stop after its nasal 0.35 (``down`` / ``pound``), a word-final t / d after
s / z / f / v 0.45. A word's distance to another is the smallest over their
pronunciations.

:func:`find_neighbours` / :func:`neighbours` search the plain words (lowercase letters,
one inner apostrophe as in ``don't``; no single letters but a, i, o) that the language
model knows at least ``min_log10_freq`` (-6: about once in a million words; this drops most
of the dictionary's rare names, acronyms and spelling variants) up to 4 phones longer or
shorter, and rank them by distance plus a rarity penalty (0.1 per decade of frequency
below 10**-4.5), so a common word comes before a rare name at the same distance; the
returned distance is the phone distance alone. Left out: the word itself, its homophones
(a pronunciation equal to one of the word's: ``write`` for ``right``, ``know`` for
``no``; they are what a spotter must accept, so never negatives; :func:`homophones` lists
them), the regular inflections of the word and of its homophones (``-s``, ``-es``,
``-'s``, ``-ed``, ``-d``, ``-ing``, ``-er``, also after a doubled final consonant:
``stops``, ``stopped``, ``stopping``, ``knows``) and a few irregular ones (``goes``,
``going``, ``gone``, ``went``). Numpy only (no torch); the dictionary is parsed once per
process (a few seconds), a search takes about half a second.
"""

from __future__ import annotations

import importlib.util
import math
import os
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

INSTALL_HINT = (
    "pocketsphinx's CMU pronouncing dictionary not found: install it with "
    "`pip install 'liquid-stream[peer]'` (or `pip install pocketsphinx`)"
)
DICT_NAME = "cmudict-en-us.dict"
LM_NAME = "en-us.lm.bin"
# pocketsphinx's log base for probabilities (logmath 1.0001) and its "unknown word" value
LOGBASE = 1.0001
MIN_LOG10_FREQ = -6.0  # ~ once in a million words: leaves out most names and oddities
RARE_LOG10_FREQ = -4.5  # rarer words rank lower: + RARE_PENALTY per decade below this
RARE_PENALTY = 0.1
ONSET_FACTOR = 0.85  # a word-initial consonant for a consonant costs less (rhymes are near)
NASAL_VOWEL_FACTOR = 0.7  # vowels before nasals (nasalised) are less distinct: pin / pen
FINAL_CONSONANT = 0.55  # inserting / deleting a word-final consonant after a vowel

VOWELS = ("AA", "AE", "AH", "AO", "AW", "AY", "EH", "ER", "EY", "IH", "IY", "OW", "OY", "UH", "UW")
# vowel -> (height 0 low .. 3 high, backness 0 front .. 2 back) at its start and its end
# (a diphthong glides), rounded
_V: dict[str, tuple[tuple[float, float], tuple[float, float], bool]] = {
    "IY": ((3.0, 0.0), (3.0, 0.0), False),
    "IH": ((2.5, 0.3), (2.5, 0.3), False),
    "EY": ((2.0, 0.0), (2.8, 0.1), False),
    "EH": ((1.5, 0.0), (1.5, 0.0), False),
    "AE": ((0.6, 0.0), (0.6, 0.0), False),
    "AA": ((0.0, 1.8), (0.0, 1.8), False),
    "AO": ((0.8, 2.0), (0.8, 2.0), True),
    "AH": ((1.2, 1.2), (1.2, 1.2), False),
    "ER": ((1.5, 1.0), (1.5, 1.0), False),
    "UH": ((2.5, 1.7), (2.5, 1.7), True),
    "UW": ((3.0, 2.0), (3.0, 2.0), True),
    "OW": ((1.8, 2.0), (2.6, 2.0), True),
    "AW": ((0.2, 1.2), (2.4, 1.8), False),
    "AY": ((0.2, 1.2), (2.4, 0.4), False),
    "OY": ((1.0, 2.0), (2.4, 0.4), True),
}
# consonant -> (place, manner, voiced); places 0 bilabial, 1 labiodental, 2 dental,
# 3 alveolar, 4 post-alveolar / palatal, 5 velar, 6 glottal
_C: dict[str, tuple[float, str, bool]] = {
    "P": (0, "stop", False),
    "B": (0, "stop", True),
    "T": (3, "stop", False),
    "D": (3, "stop", True),
    "K": (5, "stop", False),
    "G": (5, "stop", True),
    "F": (1, "fric", False),
    "V": (1, "fric", True),
    "TH": (2, "fric", False),
    "DH": (2, "fric", True),
    "S": (3, "fric", False),
    "Z": (3, "fric", True),
    "SH": (4, "fric", False),
    "ZH": (4, "fric", True),
    "HH": (6, "fric", False),
    "CH": (4, "affr", False),
    "JH": (4, "affr", True),
    "M": (0, "nasal", True),
    "N": (3, "nasal", True),
    "NG": (5, "nasal", True),
    "L": (3, "lat", True),
    "R": (3.5, "rhot", True),
    "W": (0, "glide", True),
    "Y": (4, "glide", True),
}
_MANNER = {  # cost between two manners (symmetric; same manner 0)
    ("stop", "fric"): 0.35,
    ("stop", "affr"): 0.25,
    ("fric", "affr"): 0.25,
    ("nasal", "stop"): 0.45,
    ("lat", "rhot"): 0.2,
    ("glide", "lat"): 0.35,
    ("glide", "rhot"): 0.3,
    ("nasal", "lat"): 0.45,
    ("nasal", "rhot"): 0.5,
    ("affr", "glide"): 0.45,
}
PHONES = VOWELS + tuple(_C)
_IDX = {p: i for i, p in enumerate(PHONES)}
_IS_CONSONANT = np.array([p in _C for p in PHONES])
GLIDE_VOWEL = {
    ("W", "UW"): 0.6,
    ("W", "UH"): 0.7,
    ("Y", "IY"): 0.6,
    ("Y", "IH"): 0.7,
    ("R", "ER"): 0.5,
}
IRREGULAR = {"go": ("goes", "going", "gone", "went"), "do": ("does", "did", "done")}
_SUFFIXES = ("s", "es", "'s", "s'", "ed", "d", "ing", "er", "ers")
_WORD = re.compile(r"[a-z]+(?:'[a-z]+)?")


class PhoneticDictMissing(RuntimeError):
    """The CMU pronouncing dictionary (pocketsphinx) is not installed."""


def _vowel_cost(a: str, b: str) -> float:
    (s1, e1, r1), (s2, e2, r2) = _V[a], _V[b]
    d = math.dist(s1, s2) + math.dist(e1, e2)
    return min(0.9, 0.25 + 0.13 * d + 0.1 * (r1 != r2))


def _consonant_cost(a: str, b: str) -> float:
    (p1, m1, v1), (p2, m2, v2) = _C[a], _C[b]
    if m1 == m2 == "nasal":
        return 0.3 + 0.03 * abs(p1 - p2)  # m / n / ng: 0.36-0.45
    manner = 0.0 if m1 == m2 else _MANNER.get((m1, m2), _MANNER.get((m2, m1), 0.6))
    return min(0.9, 0.1 + 0.25 * (v1 != v2) + min(0.25, 0.07 * abs(p1 - p2)) + manner)


def sub_cost(a: str, b: str) -> float:
    """The cost of substituting phone ``b`` for phone ``a`` (0 when equal)."""
    if a == b:
        return 0.0
    if a in _V and b in _V:
        return _vowel_cost(a, b)
    if a in _C and b in _C:
        return _consonant_cost(a, b)
    return GLIDE_VOWEL.get((a, b), GLIDE_VOWEL.get((b, a), 1.3))


@lru_cache(maxsize=1)
def _sub_matrix() -> np.ndarray:
    return np.array([[sub_cost(a, b) for b in PHONES] for a in PHONES])


_HOMORGANIC = {"N": ("D", "T"), "M": ("P", "B"), "NG": ("K", "G")}


def indel_costs(phones: tuple[str, ...]) -> np.ndarray:
    """The cost of inserting / deleting each phone of a pronunciation (see the module
    docstring: weaker phones cost less)."""
    out = np.empty(len(phones))
    last = len(phones) - 1
    for i, p in enumerate(phones):
        c = 0.9 if p in _V else 0.7
        if p == "HH":
            c = 0.45
        if i == last and i > 0:
            prev = phones[i - 1]
            if p in _C and prev in _V:
                c = FINAL_CONSONANT
            elif p in _HOMORGANIC.get(prev, ()):
                c = 0.35
            elif p in ("T", "D") and prev in ("S", "Z", "F", "V"):
                c = 0.45
        out[i] = c
    return out


def _pre_nasal(phones: tuple[str, ...]) -> np.ndarray:
    """Whether each phone is a vowel followed by a nasal."""
    nxt = (*phones[1:], "") if phones else ()
    flags = [p in _V and q in ("M", "N", "NG") for p, q in zip(phones, nxt, strict=True)]
    return np.array(flags, bool)


def phone_distance(a: tuple[str, ...] | list[str], b: tuple[str, ...] | list[str]) -> float:
    """The weighted edit distance between two phone sequences (module docstring)."""
    a, b = tuple(a), tuple(b)
    if any(p not in _IDX for p in a + b):
        raise ValueError(f"unknown phone in {a} / {b}; phones are {' '.join(PHONES)}")
    if not a or not b:
        return float(indel_costs(a or b).sum())
    cands = np.array([[_IDX[q] for q in b]])
    return float(_batch_distances(a, cands, indel_costs(b)[None], _pre_nasal(b)[None])[0])


# ------------------------------------------------------------------------ the dictionary


def _package_dir() -> Path | None:
    try:
        spec = importlib.util.find_spec("pocketsphinx")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def cmudict_path() -> Path:
    """The CMU dictionary file: ``$LIQUID_STREAM_CMUDICT`` if set, else the one inside the
    installed pocketsphinx package; raises :class:`PhoneticDictMissing` (how to install)."""
    env = os.environ.get("LIQUID_STREAM_CMUDICT")
    if env:
        if not Path(env).is_file():
            raise PhoneticDictMissing(f"LIQUID_STREAM_CMUDICT={env} is not a file")
        return Path(env)
    pkg = _package_dir()
    if pkg is not None:
        for p in (pkg / "model" / "en-us" / DICT_NAME, *sorted(pkg.rglob(DICT_NAME))):
            if p.is_file():
                return p
    raise PhoneticDictMissing(INSTALL_HINT)


def dict_available() -> bool:
    """Whether :func:`cmudict_path` finds a dictionary."""
    try:
        cmudict_path()
    except PhoneticDictMissing:
        return False
    return True


def parse_cmudict(text: str) -> dict[str, list[tuple[str, ...]]]:
    """``word -> pronunciations`` (``word(2)`` variants merged, stress digits and ``#``
    comments dropped, unknown phones rejected)."""
    out: dict[str, list[tuple[str, ...]]] = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line or line.startswith(";;;"):
            continue
        head, *phones = line.split()
        word = re.sub(r"\(\d+\)$", "", head).lower()
        pron = tuple(re.sub(r"\d", "", p).upper() for p in phones)
        if not pron or any(p not in _IDX for p in pron):
            continue
        prons = out.setdefault(word, [])
        if pron not in prons:
            prons.append(pron)
    return out


@dataclass
class Lexicon:
    """The dictionary's plain words: pronunciations and log10 unigram frequencies (None
    where no language model was found)."""

    prons: dict[str, list[tuple[str, ...]]]
    log10_freq: dict[str, float] | None
    path: str


def _unigrams(dict_path: Path, words: list[str]) -> dict[str, float] | None:
    lm = dict_path.parent / LM_NAME
    if not lm.is_file():
        return None
    try:
        import pocketsphinx
    except ImportError:
        return None
    try:
        pocketsphinx.set_loglevel("FATAL")
    except Exception:  # noqa: BLE001  (an older binding without it)
        pass
    model = pocketsphinx.NGramModel.readfile(str(lm))
    scale = math.log10(LOGBASE)
    out = {}
    for w in words:
        v = model.prob([w])
        if v > -(2**28):  # -2**29: not in the model
            out[w] = v * scale
    return out


@lru_cache(maxsize=4)
def _load(path: str) -> Lexicon:
    prons = parse_cmudict(Path(path).read_text(encoding="utf-8", errors="replace"))
    return Lexicon(prons, _unigrams(Path(path), list(prons)), path)


def lexicon() -> Lexicon:
    """The parsed dictionary (cached per process)."""
    return _load(str(cmudict_path()))


def pronunciations(word: str) -> list[tuple[str, ...]]:
    """The word's pronunciations (ARPAbet, no stress); ValueError if it has none."""
    prons = lexicon().prons.get(word.lower())
    if not prons:
        raise ValueError(f"{word!r} is not in the pronouncing dictionary")
    return list(prons)


def homophones(word: str) -> list[str]:
    """Plain words with a pronunciation equal to one of ``word``'s (sorted, not itself)."""
    word = word.lower()
    mine = set(pronunciations(word))
    lex = lexicon()
    return sorted(
        w
        for w, ps in lex.prons.items()
        if w != word and _WORD.fullmatch(w) and mine.intersection(ps)
    )


def inflections(word: str) -> set[str]:
    """Spellings counted as forms of ``word`` (module docstring), itself included."""
    word = word.lower()
    stems = {word}
    if len(word) >= 2 and word[-1] not in "aeiouwyx" and word[-2] in "aeiou":
        stems.add(word + word[-1])  # stop -> stopp(ed)
    if word.endswith("e"):
        stems.add(word[:-1])  # like -> lik(ing)
    out = {s + suf for s in stems for suf in _SUFFIXES} | {word}
    return out | set(IRREGULAR.get(word, ()))


@dataclass(frozen=True)
class Neighbour:
    word: str
    distance: float
    phones: tuple[str, ...]  # the candidate's pronunciation nearest the keyword's
    log10_freq: float | None


def _batch_distances(
    a: tuple[str, ...], cands: np.ndarray, ins: np.ndarray, nasal: np.ndarray
) -> np.ndarray:
    """Edit distances from ``a`` to many candidates of one length (rows of phone indices,
    with their insertion costs and :func:`_pre_nasal` flags), the DP vectorised over the
    candidates."""
    sub = _sub_matrix()
    da, a_nasal = indel_costs(a), _pre_nasal(a)
    n, m = cands.shape
    prev = np.concatenate([np.zeros((n, 1)), np.cumsum(ins, axis=1)], axis=1)
    for i, p in enumerate(a):
        row = sub[_IDX[p]][cands]  # (n, m)
        if i == 0 and p in _C:
            row[:, 0] *= np.where(_IS_CONSONANT[cands[:, 0]], ONSET_FACTOR, 1.0)
        if a_nasal[i]:
            row *= np.where(nasal, NASAL_VOWEL_FACTOR, 1.0)
        cur = np.empty_like(prev)
        cur[:, 0] = prev[:, 0] + da[i]
        for j in range(m):
            cur[:, j + 1] = np.minimum(
                np.minimum(prev[:, j] + row[:, j], prev[:, j + 1] + da[i]), cur[:, j] + ins[:, j]
            )
        prev = cur
    return prev[:, -1]


@lru_cache(maxsize=4)
def _by_length(path: str, min_log10_freq: float | None) -> dict[int, tuple]:
    lex = _load(path)
    groups: dict[int, tuple[list, list, list, list]] = {}
    for w, ps in lex.prons.items():
        if not _WORD.fullmatch(w) or (len(w) == 1 and w not in "aio"):
            continue
        if lex.log10_freq is not None and min_log10_freq is not None:
            f = lex.log10_freq.get(w)
            if f is None or f < min_log10_freq:
                continue
        for pr in ps:
            g = groups.setdefault(len(pr), ([], [], [], []))
            g[0].append(w)
            g[1].append([_IDX[p] for p in pr])
            g[2].append(indel_costs(pr))
            g[3].append(_pre_nasal(pr))
    return {n: tuple(np.array(v) if i else v for i, v in enumerate(g)) for n, g in groups.items()}


def find_neighbours(
    word: str,
    k: int = 20,
    *,
    max_distance: float | None = None,
    min_log10_freq: float | None = MIN_LOG10_FREQ,
    exclude: set[str] | frozenset[str] = frozenset(),
) -> list[Neighbour]:
    """The ``k`` nearest words (fewer if ``max_distance`` cuts them), nearest first, ties
    broken by frequency then spelling; see the module docstring for what is left out.
    ``exclude``: more words to leave out (e.g. the other keywords)."""
    word = word.lower()
    lex = lexicon()
    mine = pronunciations(word)
    same = homophones(word)
    skip = inflections(word).union(*map(inflections, same)) | {w.lower() for w in exclude}
    groups = _by_length(lex.path, min_log10_freq)
    best: dict[str, tuple[float, tuple[str, ...]]] = {}
    span = 4  # candidates up to 4 phones longer / shorter (>= 1.4 by insertions alone)
    for pron in mine:
        for n in range(max(1, len(pron) - span), len(pron) + span + 1):
            if n not in groups:
                continue
            ws, ix, ins, nasal = groups[n]
            d = _batch_distances(pron, ix, ins, nasal)
            for i in np.flatnonzero(d <= (np.inf if max_distance is None else max_distance)):
                w = ws[i]
                if w in skip:
                    continue
                if w not in best or d[i] < best[w][0]:
                    best[w] = (float(d[i]), tuple(PHONES[j] for j in ix[i]))
    freq = lex.log10_freq or {}

    def rank(w: str) -> tuple[float, float, str]:
        f = freq.get(w)
        rare = 0.0 if f is None else RARE_PENALTY * max(0.0, RARE_LOG10_FREQ - f)
        return round(best[w][0] + rare, 6), -(f if f is not None else -99.0), w

    order = sorted(best, key=rank)
    return [Neighbour(w, round(best[w][0], 4), best[w][1], freq.get(w)) for w in order[:k]]


def neighbours(word: str, k: int = 20, **kw) -> list[tuple[str, float]]:
    """``[(word, distance), ...]``: :func:`find_neighbours` as pairs."""
    return [(n.word, n.distance) for n in find_neighbours(word, k, **kw)]
