"""Generated answers are checked, not trusted: keep only what the sources support.

After check_citations has removed invalid markers, a generated answer is split into
sentences. A sentence stays only when
- it carries at least one valid [n] marker,
- every span it quotes ("...") is found in one of the sources it cites, and
- its claim is in the sources it cites: every number and identifier it states appears in
  them, and at least `min_support` of its other content words do (a word matches a source
  word with the same stem or first five letters, so "lists" matches "listed");
- each citation holds on its own (issue 35, item 12): every number and identifier of the part
  of the sentence a marker closes is in each source that marker cites, so a claim cited to a
  genuine page and an injected one together fails on the genuine one;
- its negation is its sources' (issue 35, item 11): each clause's best-matching clause in each
  cited source says "not"/"no"/"never"/"n't"/... exactly when it does.
Anything else is removed, counted and listed with its reason (`Grounded.removed`), so the
output says what was dropped. An answer left with no sentence is `unsupported`.

The claim check is lexical on purpose: a model that was told by a document to "cite [2]
for X" must find X's words in source 2, whatever it was told.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from transforms.common.sentences import ANSWER_SENTENCE_END, split_answer_sentences
from transforms.common.words import CLAIM_FRAME_WORDS
from transforms.query.cite import _MARKER, _quote_in, quotable
from transforms.query.records import Candidate

UNSUPPORTED = "unsupported"
NO_CITATION, QUOTE_NOT_IN_SOURCE, CLAIM_NOT_IN_SOURCE = "no_citation", "quote_not_in_source", "claim_not_in_source"
MIN_SUPPORT = 0.6  # answer.claim_support's default
_QUOTED = re.compile(r"[\"\u201c]([^\"\u201c\u201d]{3,}?)[\"\u201d]")
_TOKEN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]*[A-Za-z0-9_]|[A-Za-z0-9]")
# a clause is negated when it holds one of these (presence, not parity: "neither ... nor" is one
# negation); "no-op" and other hyphenated identifiers are not negations
_NEGATION = re.compile(r"(?<![\w\-])(?:not|no|never|none|nobody|nothing|neither|nor|nowhere|cannot|without)"
                       r"(?![\w\-])|\w(?:n['\u2019]t)(?!\w)", re.IGNORECASE)
# clause boundaries inside a sentence: punctuation and the conjunctions that join two claims
_CLAUSE = re.compile(r"[,;:()]|\s[-\u2013\u2014]\s|\b(?:and|but|or|while|whereas|although|though|however|"
                     r"because|so|yet|unless|except)\b", re.IGNORECASE)
# a command-line flag (--force, -v): the word tokens drop its dashes, so it is matched whole
_FLAG = re.compile(r"(?<![\w\-])--?[A-Za-z][\w\-]*")
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
        self.flags = {f.casefold() for f in _FLAG.findall(text)}

    def has(self, token: str) -> bool:
        t = token.casefold()
        if t in self.exact:
            return True
        if _is_exact(token):
            return False
        return _stem(t) in self.stems or (len(t) >= _PREFIX and t[:_PREFIX] in self.prefixes)


def _claim_words(text: str) -> list[str]:
    return [t for t in _tokens(text) if t.casefold() not in CLAIM_FRAME_WORDS and (len(t) > 2 or _is_exact(t))]


def is_negated(text: str) -> bool:
    """Whether a clause says not, no, never, none, nothing, neither, nor, cannot, without or n't."""
    return bool(_NEGATION.search(_MARKER.sub(" ", text)))


def _clauses(text: str) -> list[str]:
    return [c for s in ANSWER_SENTENCE_END.split(text) if s for c in _CLAUSE.split(_MARKER.sub(" ", s)) if c and c.strip()]


class SourceClauses:
    """A source's clauses, each with its words and its negation, for the negation check."""

    def __init__(self, text: str):
        self.clauses = [(SourceWords(c), is_negated(c)) for c in _clauses(text)]

    def polarities_of_best_match(self, words: list[str]) -> set[bool]:
        """The negations of the clauses that share most of `words` (at least half of them, and
        at least one); empty when no clause shares that many (the claim check judges those)."""
        need = max(1, (len(words) + 1) // 2)
        best, out = 0, set()
        for clause_words, negated in self.clauses:
            n = sum(clause_words.has(w) for w in words)
            if n < need or n < best:
                continue
            if n > best:
                best, out = n, set()
            out.add(negated)
        return out


def negation_differs(segment: str, source: SourceClauses) -> bool:
    """Whether a clause of `segment` is negated where its best match in the source is not, or
    the other way round ("must never wear a blue badge" against "must wear a blue badge")."""
    for clause in _clauses(segment):
        words = _claim_words(clause)
        if not words:
            continue
        polarities = source.polarities_of_best_match(words)
        if polarities and is_negated(clause) not in polarities:
            return True
    return False


def cited_segments(sentence: str) -> list[tuple[str, list[int]]]:
    """The sentence cut at its markers: (the text a marker group closes, its source numbers).
    Markers with nothing but spaces or punctuation between them are one group ("X [1][2]");
    text after the last marker belongs to the last group."""
    out: list[tuple[str, list[int]]] = []
    start = 0
    for m in _MARKER.finditer(sentence):
        text = sentence[start:m.start()]
        numbers = [int(p) for p in m.group(1).split(",")]
        if out and not _TOKEN.search(text):
            out[-1][1].extend(n for n in numbers if n not in out[-1][1])
        else:
            out.append((text, list(dict.fromkeys(numbers))))
        start = m.end()
    tail = sentence[start:]
    if out and _TOKEN.search(tail):
        out[-1] = (out[-1][0] + " " + tail, out[-1][1])
    return out


def claim_support(sentence: str, sources: list[SourceWords]) -> tuple[float, list[str]]:
    """(share of the sentence's claim words found in the sources, the exact tokens not found).
    A sentence with no claim word (only framing) has support 1.0: it states nothing to check."""
    words = _claim_words(sentence)
    if not words:
        return 1.0, []
    found = [any(s.has(w) for s in sources) for w in words]
    missing_exact = [w for w, ok in zip(words, found) if not ok and _is_exact(w)]
    return sum(found) / len(words), missing_exact


def ground_answer(answer: str, sources: list[Candidate], min_support: float = MIN_SUPPORT) -> Grounded:
    """`answer` must already have gone through check_citations (markers are valid numbers)."""
    norm: dict[int, tuple[str, ...]] = {}
    words: dict[int, SourceWords] = {}
    clauses: dict[int, SourceClauses] = {}

    def source_norm(n: int) -> tuple[str, ...]:
        if n not in norm:
            norm[n] = quotable(sources[n - 1])
        return norm[n]

    def source_words(n: int) -> SourceWords:
        if n not in words:  # the cited chunk's text only: its context prefix is not evidence
            words[n] = SourceWords(sources[n - 1].text or "")
        return words[n]

    def source_clauses(n: int) -> SourceClauses:
        if n not in clauses:
            clauses[n] = SourceClauses(sources[n - 1].text or "")
        return clauses[n]

    def each_citation_holds(sent: str) -> bool:
        """Every number and identifier a marker group closes is in each source it cites, and no
        clause's negation differs from its best match in any of them."""
        for text, group in cited_segments(sent):
            group = [n for n in group if 1 <= n <= len(sources)]
            exact = [w for w in _claim_words(text) if _is_exact(w)]
            flags = {f.casefold() for f in _FLAG.findall(_MARKER.sub(" ", text))}
            for n in group:
                if any(not source_words(n).has(w) for w in exact) or not flags <= source_words(n).flags:
                    return False
                if negation_differs(_QUOTED.sub(" ", text), source_clauses(n)):
                    return False
        return True

    kept, cited, removed, bad_quotes = [], [], [], 0
    for sent in split_answer_sentences(answer):
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
            if missing_exact or support < min_support or not each_citation_holds(sent):
                removed.append({"sentence": sent, "reason": CLAIM_NOT_IN_SOURCE})
                continue
        kept.append(sent)
        cited += [n for n in numbers if n not in cited]
    return Grounded(" ".join(kept), cited, len(removed), bad_quotes, removed)
