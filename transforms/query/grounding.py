"""Generated answers are checked, not trusted: keep only what the sources support.

After check_citations has removed invalid markers, a generated answer is split into
sentences. A sentence stays only when
- it carries at least one valid [n] marker,
- every span it quotes ("...") is found in one of the sources it cites, and
- its claim is in the sources it cites: every number and identifier it states appears in
  them, and at least `min_support` of its other content words do (a word matches a source
  word with the same stem or first five letters, so "lists" matches "listed").
Anything else is removed, counted and listed with its reason (`Grounded.removed`), so the
output says what was dropped. An answer left with no sentence is `unsupported`.

The claim check is lexical on purpose: a model that was told by a document to "cite [2]
for X" must find X's words in source 2, whatever it was told.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from transforms.query.cite import _MARKER, _quote_in, quotable
from transforms.query.records import Candidate

UNSUPPORTED = "unsupported"
NO_CITATION, QUOTE_NOT_IN_SOURCE, CLAIM_NOT_IN_SOURCE = "no_citation", "quote_not_in_source", "claim_not_in_source"
MIN_SUPPORT = 0.6  # answer.claim_support's default
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")
_QUOTED = re.compile(r"[\"\u201c]([^\"\u201c\u201d]{3,}?)[\"\u201d]")
_TOKEN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]*[A-Za-z0-9_]|[A-Za-z0-9]")
# words that carry no claim of their own (function words, and the model's framing words)
_FRAME = frozenset("""a an and are as at be been but by can could do does did for from has have had how i if in
into is it its may might must no not of on or our should so such than that the their them then there these
they this those to was we were what when where which while who whom whose why will with would you your also
according answer based both each either source sources text question states stated says said using use used
via within without yes""".split())
_PREFIX = 5  # letters two words share to count as one (inflections: serialize, serializes)
_SUFFIX = re.compile(r"(?:ing|ed|es|s)$")


def _stem(word: str) -> str:
    """list, lists, listed, listing -> list (a light suffix cut; the prefix rule does the rest)."""
    cut = _SUFFIX.sub("", word)
    return cut if len(cut) >= 3 else word


@dataclass
class Grounded:
    answer: str
    kept_sources: list[int]  # source numbers still cited by the kept sentences
    sentences_removed: int
    quotes_removed: int
    removed: list[dict] = field(default_factory=list)  # {"sentence", "reason"} per removed sentence


_LEADING_MARKERS = re.compile(r"^(?:\[\s*\d{1,4}(?:\s*,\s*\d{1,4})*\s*\]\s*)+")


def _split_sentences(text: str) -> list[str]:
    """Sentences, each with its markers: in "X. [1] Y." the [1] belongs to X (the extractive
    answers and many models put the marker after the full stop)."""
    out: list[str] = []
    for piece in (s.strip() for s in _SENTENCE_END.split(text) if s and s.strip()):
        m = _LEADING_MARKERS.match(piece)
        if m and out:
            out[-1] = f"{out[-1]} {m.group(0).strip()}"
            piece = piece[m.end():].strip()
        if piece:
            out.append(piece)
    return out


def _is_exact(token: str) -> bool:
    """Numbers and identifiers (json.dumps, 0o755, --force, snake_case, camelCase) must match exactly."""
    return any(ch.isdigit() for ch in token) or any(ch in token for ch in "._-") or \
        (any(ch.isupper() for ch in token[1:]) and any(ch.islower() for ch in token))


def _tokens(text: str) -> list[str]:
    return _TOKEN.findall(_MARKER.sub(" ", text))


class SourceWords:
    """A source's words, for the claim check: exact tokens, stems and five-letter prefixes."""

    def __init__(self, text: str):
        toks = [t.casefold() for t in _tokens(text)]
        self.exact = set(toks)
        self.stems = {_stem(t) for t in toks}
        self.prefixes = {t[:_PREFIX] for t in toks if len(t) >= _PREFIX}

    def has(self, token: str) -> bool:
        t = token.casefold()
        if t in self.exact:
            return True
        if _is_exact(token):
            return False
        return _stem(t) in self.stems or (len(t) >= _PREFIX and t[:_PREFIX] in self.prefixes)


def claim_support(sentence: str, sources: list[SourceWords]) -> tuple[float, list[str]]:
    """(share of the sentence's claim words found in the sources, the exact tokens not found).
    A sentence with no claim word (only framing) has support 1.0: it states nothing to check."""
    words = [t for t in _tokens(sentence) if t.casefold() not in _FRAME and (len(t) > 2 or _is_exact(t))]
    if not words:
        return 1.0, []
    found = [any(s.has(w) for s in sources) for w in words]
    missing_exact = [w for w, ok in zip(words, found) if not ok and _is_exact(w)]
    return sum(found) / len(words), missing_exact


def ground_answer(answer: str, sources: list[Candidate], min_support: float = MIN_SUPPORT) -> Grounded:
    """`answer` must already have gone through check_citations (markers are valid numbers)."""
    norm: dict[int, tuple[str, ...]] = {}
    words: dict[int, SourceWords] = {}

    def source_norm(n: int) -> tuple[str, ...]:
        if n not in norm:
            norm[n] = quotable(sources[n - 1])
        return norm[n]

    def source_words(n: int) -> SourceWords:
        if n not in words:  # the cited chunk's text only: its context prefix is not evidence
            words[n] = SourceWords(sources[n - 1].text or "")
        return words[n]

    kept, cited, removed, bad_quotes = [], [], [], 0
    for sent in _split_sentences(answer):
        numbers = [int(p) for m in _MARKER.finditer(sent) for p in m.group(1).split(",")
                   if 1 <= int(p) <= len(sources)]
        if not numbers:
            removed.append({"sentence": sent, "reason": NO_CITATION})
            continue
        quotes = _QUOTED.findall(sent)
        unfound = [q for q in quotes if not any(_quote_in(q, source_norm(n)) for n in numbers)]
        if unfound:
            bad_quotes += len(unfound)
            removed.append({"sentence": sent, "reason": QUOTE_NOT_IN_SOURCE})
            continue
        if min_support > 0:
            support, missing_exact = claim_support(_QUOTED.sub(" ", sent), [source_words(n) for n in numbers])
            if missing_exact or support < min_support:
                removed.append({"sentence": sent, "reason": CLAIM_NOT_IN_SOURCE})
                continue
        kept.append(sent)
        cited += [n for n in numbers if n not in cited]
    return Grounded(" ".join(kept), cited, len(removed), bad_quotes, removed)
