"""Generated answers are checked, not trusted: keep only what the sources support.

After check_citations has removed invalid markers, a generated answer is split into
sentences. A sentence stays only when it carries at least one valid [n] marker and every
span it quotes ("...") is found in one of the sources it cites; anything else is removed
and counted. An answer left with no sentence is `unsupported` (never `answered`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from transforms.query.cite import _MARKER, _quote_in, normalize_for_match
from transforms.query.records import Candidate

UNSUPPORTED = "unsupported"
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")
_QUOTED = re.compile(r"[\"\u201c]([^\"\u201c\u201d]{3,}?)[\"\u201d]")


@dataclass
class Grounded:
    answer: str
    kept_sources: list[int]  # source numbers still cited by the kept sentences
    sentences_removed: int
    quotes_removed: int


def _split_sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE_END.split(text) if s and s.strip()]


def ground_answer(answer: str, sources: list[Candidate]) -> Grounded:
    """`answer` must already have gone through check_citations (markers are valid numbers)."""
    norm = {}

    def source_norm(n: int) -> str:
        if n not in norm:
            norm[n] = normalize_for_match(sources[n - 1].text or "")
        return norm[n]

    kept, cited, removed, bad_quotes = [], [], 0, 0
    for sent in _split_sentences(answer):
        numbers = [int(p) for m in _MARKER.finditer(sent) for p in m.group(1).split(",")
                   if 1 <= int(p) <= len(sources)]
        if not numbers:
            removed += 1
            continue
        quotes = _QUOTED.findall(sent)
        unfound = [q for q in quotes if not any(_quote_in(q, source_norm(n)) for n in numbers)]
        if unfound:
            bad_quotes += len(unfound)
            removed += 1
            continue
        kept.append(sent)
        cited += [n for n in numbers if n not in cited]
    return Grounded(" ".join(kept), cited, removed, bad_quotes)
