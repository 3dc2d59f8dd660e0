"""Citation checking in code: every [n] must name a real source, every quote must be in it.

Sources are numbered 1..len(sources) in prompt order. Invalid markers are removed
from the answer (a reader never sees a citation that points nowhere) and counted.
"""
from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from typing import Optional, Union

from transforms.query.records import Candidate

# [3] or [1, 2]; not list[0] in code (a word character right before '[').
_MARKER = re.compile(r"(?<!\w)\[\s*(\d{1,4}(?:\s*,\s*\d{1,4})*)\s*\]")
# "quoted span" [n] (straight or curly quotes), the marker right after the quote.
_INLINE_QUOTE = re.compile(
    r"[\"\u201c]([^\"\u201c\u201d]{3,}?)[\"\u201d]\s*(?=" + _MARKER.pattern + ")")
_QUOTE_FOLD = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"',
                             "\u2013": "-", "\u2014": "-", "\u00a0": " "})


@dataclass
class CitationCheck:
    answer: str  # the answer with invalid markers removed
    citations: list[dict] = field(default_factory=list)  # one per valid cited source
    invalid: list[str] = field(default_factory=list)  # one reason per invalid marker or quote
    n_invalid: int = 0

    @property
    def ok(self) -> bool:
        return self.n_invalid == 0


def parse_citations(answer: str) -> list[int]:
    """Source numbers cited in the answer, in order of first appearance, each once."""
    out: list[int] = []
    for m in _MARKER.finditer(answer):
        for part in m.group(1).split(","):
            n = int(part)
            if n not in out:
                out.append(n)
    return out


def strip_markers(text: str) -> str:
    """Text with [n]-style markers removed (e.g. footnotes inside a quoted source sentence)."""
    return " ".join(_MARKER.sub("", text).split())


def normalize_for_match(text: str) -> str:
    """Case, whitespace, unicode-form and typographic-quote insensitive form."""
    text = unicodedata.normalize("NFKC", text).translate(_QUOTE_FOLD).casefold()
    return " ".join(text.split())


def _quote_in(quote: str, source_norms: tuple[str, ...]) -> bool:
    q = normalize_for_match(quote).strip(" .,;:")
    return bool(q) and any(q in t for t in source_norms)


def quotable(src: Candidate) -> tuple[str, ...]:
    """What a quote from a source may come from, normalised: its text and its own headings (the
    document's words; a section's heading can be the very call it documents). Never the chunk's
    context, which may be written by a model."""
    heads = [str(h) for h in (list(src.heading_path) if src.heading_path is not None else [])]
    return tuple(normalize_for_match(t) for t in [src.text or ""] + heads)


def check_citations(answer: str, sources: list[Candidate],
                    quotes: Optional[dict[int, Union[str, list[str]]]] = None) -> CitationCheck:
    """Validate [n] markers and claimed quotes against `sources`; drop what fails.

    quotes: source number -> quoted span(s) claimed to come from it. Quotes written
    inline as "..." [n] are checked too. A marker is invalid when n is out of range
    or when its source was claimed to contain a span it does not contain.
    """
    invalid: list[str] = []
    n_sources = len(sources)
    norm_texts: dict[int, tuple[str, ...]] = {}

    def source_norm(n: int) -> tuple[str, ...]:
        if n not in norm_texts:
            norm_texts[n] = quotable(sources[n - 1])
        return norm_texts[n]

    valid_quotes: dict[int, list[str]] = {}
    bad_sources: dict[int, str] = {}  # a quote claimed for them was not in them
    for n, qs in (quotes or {}).items():
        for q in ([qs] if isinstance(qs, str) else list(qs)):
            if not 1 <= n <= n_sources:
                bad_sources[n] = f"quote claimed for nonexistent source [{n}]"
            elif _quote_in(q, source_norm(n)):
                valid_quotes.setdefault(n, []).append(q)
            else:
                bad_sources[n] = f"quote not found in source [{n}]: {q[:80]!r}"

    # Inline quotes bind to the marker right after them; a bad one voids that marker only.
    bad_marker_at: dict[tuple[int, int], str] = {}  # (marker start, n) -> reason
    for qm in _INLINE_QUOTE.finditer(answer):
        mm = _MARKER.match(answer, qm.end())
        if not mm:
            continue
        for part in mm.group(1).split(","):
            n = int(part)
            if not 1 <= n <= n_sources:
                continue
            if _quote_in(qm.group(1), source_norm(n)):
                valid_quotes.setdefault(n, []).append(qm.group(1))
            else:
                bad_marker_at[(mm.start(), n)] = (
                    f"quote not found in source [{n}]: {qm.group(1)[:80]!r}")

    cited: list[int] = []
    marked: set[int] = set()  # out-of-range numbers already reported at a marker

    def fix_marker(m: re.Match) -> str:
        keep = []
        for part in m.group(1).split(","):
            n = int(part)
            if not 1 <= n <= n_sources:
                invalid.append(f"citation [{n}] does not match any of the {n_sources} sources")
                marked.add(n)
            elif n in bad_sources:
                invalid.append(bad_sources[n])
            elif (m.start(), n) in bad_marker_at:
                invalid.append(bad_marker_at[(m.start(), n)])
            elif n not in keep:
                keep.append(n)
        for n in keep:
            if n not in cited:
                cited.append(n)
        return "[" + ", ".join(str(n) for n in keep) + "]" if keep else "\x00"

    cleaned = _MARKER.sub(fix_marker, answer)
    if "\x00" in cleaned:  # a removed marker takes its leading space with it
        cleaned = re.sub(r"[ \t]*\x00", "", cleaned)
    # A bad quote whose source no marker cites is still an invented quote: count it once.
    for n, reason in bad_sources.items():
        if n not in cited and n not in marked and not any(reason == r for r in invalid):
            invalid.append(reason)
    citations = []
    for n in cited:
        src = sources[n - 1]
        qs = valid_quotes.get(n, [])
        citations.append({
            "n": n,
            "doc_id": src.doc_id,
            "chunk_id": src.chunk_id,
            "source": src.source_uri,
            "title": src.title,
            "quote": qs[0] if qs else None,
            "quotes": qs,
        })
    return CitationCheck(answer=cleaned, citations=citations, invalid=invalid,
                         n_invalid=len(invalid))


def cite_sentences(picked, cands) -> "CitationCheck":
    """Quoted sentences [(candidate index, sentence)] -> the answer text, each sentence followed
    by the [n] of its own source (sources numbered in order of first use), checked in code.
    A sentence may be a tuple of pieces quoted from one source (a table's header and one of its
    rows): written joined by ": ", each piece checked as a quote."""
    number: dict[int, int] = {}
    parts, quotes = [], {}
    for ci, s in picked:
        n = number.setdefault(ci, len(number) + 1)
        pieces = list(s) if isinstance(s, tuple) else [s]
        # Footnote markers inside the source sentence would read as our citations.
        parts.append(f"{': '.join(strip_markers(x) for x in pieces)} [{n}]")
        quotes.setdefault(n, []).extend(pieces)
    sources = [cands[ci] for ci in sorted(number, key=number.get)]
    return check_citations(" ".join(parts), sources, quotes)
