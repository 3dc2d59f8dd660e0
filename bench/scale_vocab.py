"""The scale corpus's vocabulary: real head terms kept, tail words re-drawn from a Zipf law.

The head is the pool's most frequent BM25 terms covering HEAD_COVERAGE of its tokens: those words
stay as they are. Every other plain word is a tail slot: a synthetic document replaces each of its
tail terms (the same term by the same word throughout the document, as real documents repeat their
rare words) by the word of rank x drawn from a Zipf law over ranks x >= R (R = the head's size),
P(X >= x) = (R / x)^(s - 1). Rank x is the pool's own x-th term while the pool has one (its most
frequent surface form), then a coined word ("q" + a vowel + consonant-vowel syllables, which the
Porter stemmer leaves whole). Drawing i.i.d. from a Zipf law with exponent s makes the distinct
words grow as m^(1/s) with the m draws: Heaps' law. s is calibrated so that the expected distinct
terms of n synthetic tokens, V_fixed + D(rho n), match K n^beta fitted on the real text over the
bench's sizes (least squares in log space); V_fixed: the pool's terms outside the tail slots (head
words, numbers, codes), rho: tail draws per token.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

HEAD_COVERAGE = 0.8
MAX_RANK = 10 ** 15  # a draw past this is clipped (a 1-in-10^9 event at s = 1.5)
_CONS = "bdfgklmnprstvz"
_SYLLABLES = [c + v for c in _CONS for v in "aeiou"]
_LAST = [c + v for c in _CONS for v in "ao"]  # no Porter suffix ends in a or o after a consonant


def coin(k: int) -> str:
    """The k-th coined word (k >= 0): distinct for every k, lower-case ASCII letters."""
    k, last = divmod(int(k), len(_LAST))
    k, first = divmod(k, 4)
    mid = []
    while True:
        k, r = divmod(k, len(_SYLLABLES))
        mid.append(_SYLLABLES[r])
        if k == 0:
            break
    return "q" + "aeio"[first] + "".join(reversed(mid)) + _LAST[last]


def head_size(counts: Sequence[int], coverage: float = HEAD_COVERAGE) -> int:
    """The fewest most frequent terms (counts falling) holding `coverage` of the tokens."""
    c = np.cumsum(np.asarray(counts, np.float64))
    return int(np.searchsorted(c, coverage * c[-1]) + 1) if len(c) else 0


def expected_distinct(m: float, x_min: float, s: float, first: int, exact: int = 20_000) -> float:
    """Expected distinct ranks >= first among m i.i.d. draws X = floor(x_min U^(-1/(s-1))), U
    uniform on (0, 1]: P(X >= x) = (x_min / x)^(s-1) for x >= x_min."""
    if m <= 0:
        return 0.0
    a = s - 1.0
    lo = max(float(first), math.floor(x_min))
    x = np.arange(lo, lo + exact, dtype=np.float64)
    p = np.minimum(1.0, (x_min / np.maximum(x, x_min)) ** a) - (x_min / (x + 1.0)) ** a
    near = float(np.sum(-np.expm1(-m * np.maximum(p, 0.0))))
    # ranks past lo + exact: the density a x_min^a x^-(a+1) integrated on a log grid
    t = np.linspace(0.0, 80.0, 2001)
    xs = (lo + exact) * np.exp(t)
    f = -np.expm1(-m * a * x_min ** a * xs ** (-(a + 1.0))) * xs
    return near + float(np.sum((f[1:] + f[:-1]) * 0.5 * np.diff(t)))


def _golden(f, lo: float, hi: float, steps: int = 30) -> tuple[float, float]:
    g = (math.sqrt(5) - 1) / 2
    a, b = hi - g * (hi - lo), lo + g * (hi - lo)
    fa, fb = f(a), f(b)
    for _ in range(steps):
        if fa < fb:
            hi, b, fb = b, a, fa
            a = hi - g * (hi - lo)
            fa = f(a)
        else:
            lo, a, fa = a, b, fb
            b = lo + g * (hi - lo)
            fb = f(b)
    return (a, fa) if fa < fb else (b, fb)


class VocabularyModel:
    """Tail words of the synthetic corpus: `draw` picks ranks, `surface(x)` names rank x.

    Ranks index the pool's plain-word terms by falling count (their most frequent surface form),
    then coined words; ranks below `R` are head words (a draw there adds no term)."""

    def __init__(self, terms: Sequence[str], counts: Sequence[int], surfaces: Sequence, s: float = 1.5):
        head = head_size(counts)
        self.head = frozenset(terms[:head])
        self.words = [w for w in surfaces if w]
        self.R = sum(1 for t, w in zip(terms[:head], surfaces[:head]) if w)  # head words lead self.words
        self.s, self.x_min = float(s), float(max(1, self.R))

    def surface(self, rank: int) -> str:
        i = int(rank)
        return self.words[i] if i < len(self.words) else coin(i - len(self.words))

    def draw(self, rng: np.random.Generator, k: int) -> np.ndarray:
        u = 1.0 - rng.random(k)  # (0, 1]
        x = self.x_min * u ** (-1.0 / (self.s - 1.0))
        return np.minimum(x, MAX_RANK).astype(np.int64)

    def expected_terms(self, n_tokens: float, v_fixed: int, draws_per_token: float) -> float:
        return v_fixed + expected_distinct(draws_per_token * n_tokens, self.x_min, self.s, self.R)

    def calibrate(self, K: float, beta: float, v_fixed: int, draws_per_token: float,
                  n_lo: float, n_hi: float, points: int = 10) -> float:
        """Set s and x_min so that expected_terms follows K n^beta on [n_lo, n_hi] (least squares
        of the logs: golden-section over s inside one over log x_min); returns the RMS log error."""
        ns = np.geomspace(n_lo, n_hi, points)
        target = np.log(K * ns ** beta)

        def err(s: float, x_min: float) -> float:
            self.s, self.x_min = s, x_min
            got = np.log([self.expected_terms(n, v_fixed, draws_per_token) for n in ns])
            return float(np.mean((got - target) ** 2))

        def best_s(log_x: float) -> float:
            return _golden(lambda s: err(s, math.exp(log_x)), 1.02, 6.0, 25)[1]

        top = math.log(max(2.0, 100.0 * max(1, self.R)))
        log_x, _ = _golden(best_s, 0.0, top, 20)
        x_min = math.exp(log_x)
        s, e = _golden(lambda s: err(s, x_min), 1.02, 6.0, 25)
        self.s, self.x_min = s, x_min
        return math.sqrt(e)
