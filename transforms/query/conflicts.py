"""Sources that disagree: competing numbers or dates for what the answer states.

The extractive answerer quotes its best sentences. When another strong candidate sentence,
from another document, gives a different value with the same unit (12 bar vs 99 bar) or a
different year for the same thing, the answer says so: `conflicts` lists each competing
quote with its value and source, the answer's own first. Nothing is decided here; the
reader sees both.
"""
from __future__ import annotations

import re
from typing import Callable

from transforms.common.words import NOT_UNIT_WORDS

# a number with the word or symbol right after it ("12 bar", "3.5 MB", "40%"), or a year
_QUANTITY = re.compile(r"(?<![\w.])(\d+(?:[.,]\d+)?)\s?(%|°[CF]?|[A-Za-zµ]{1,12})(?![A-Za-zµ])")
_YEAR = re.compile(r"(?<!\d)(1[5-9]\d\d|20\d\d)(?!\d)")


def quantities(sentence: str) -> dict[str, set[str]]:
    """unit -> the values given with it; years under the key "year"."""
    out: dict[str, set[str]] = {}
    for value, unit in _QUANTITY.findall(sentence):
        unit = unit.lower()
        if unit in NOT_UNIT_WORDS:
            continue
        out.setdefault(unit, set()).add(value.replace(",", "."))
    years = set(_YEAR.findall(sentence))
    if years:
        out["year"] = years
    return out


def find_conflicts(qwords: set[str], answer_sentences: list[tuple[int, str]], rivals: list[tuple[int, str]],
                   cands, content_words: Callable[[str], set[str]]) -> list[dict]:
    """answer_sentences / rivals: (candidate index, sentence); rivals are the other candidate
    sentences that scored near the answer's, and count only when they share a content word
    with the question (qwords). Sources conflict on a unit the answer uses when two documents
    give it different values (the answer's own sentences included). Returns [] or the quotes
    that carry those values, the answer's first."""
    found = [(ci, s, True, quantities(s)) for ci, s in answer_sentences]  # each sentence read once
    mine = {u for *_, q in found for u in q}
    if not mine:
        return []
    found += [(ci, s, False, quantities(s)) for ci, s in rivals if qwords & content_words(s)]
    found = [(ci, s, own, {u: v for u, v in q.items() if u in mine}) for ci, s, own, q in found]
    disputed = set()
    for unit in mine:
        by_doc: dict[str, set[str]] = {}
        for ci, _, _, q in found:
            if unit in q:
                by_doc.setdefault(cands[ci].doc_id, set()).update(q[unit])
        if len(by_doc) > 1 and len({frozenset(v) for v in by_doc.values()}) > 1:
            disputed.add(unit)
    if not disputed:
        return []
    return [_quote(cands[ci], s, {u: sorted(v) for u, v in q.items() if u in disputed})
            for ci, s, own, q in sorted(found, key=lambda f: not f[2]) if disputed & set(q)]


def _quote(cand, sentence: str, values: dict[str, list[str]]) -> dict:
    shown = [f"{v} {u}" if u != "year" else v for u, vs in sorted(values.items()) for v in vs]
    return {"values": shown, "quote": sentence, "doc_id": cand.doc_id, "source": cand.source_uri}
