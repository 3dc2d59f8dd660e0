"""The two sentence splitters, each for its kind of text.

split_sentences: prose of the sources (the chunker, sentence vectors, the reranker, the
extractive answerer), abbreviation-aware. split_answer_sentences: a generated answer, cut at
every . ! ? or line break, each sentence keeping the [n] markers that close it (the grounding
check and the judge).
"""
from __future__ import annotations

import re

# A sentence ends at . ! ? (optionally followed by quotes/brackets) before whitespace and
# an upper-case letter, digit or opening quote; common abbreviations are not ends.
_ABBREVIATIONS = {"e.g", "i.e", "etc", "vs", "cf", "mr", "mrs", "dr", "no", "fig", "approx", "resp"}
_END = re.compile(r"([.!?][\"')\]]*)(\s+)(?=[\"'(\[]?[A-Z0-9])")
# Text with no capitals (e.g. lower-cased abstracts) still has sentences: accept any next letter.
_END_ANY_CASE = re.compile(r"([.!?][\"')\]]*)(\s+)(?=[\"'(\[]?\w)")


def split_sentences(text: str) -> list[str]:
    """Split prose into sentences; line breaks inside a paragraph are kept as separators too."""
    out: list[str] = []
    for para in re.split(r"\n\s*\n", text):
        para = para.strip()
        if not para:
            continue
        start = 0
        pattern = _END if any(c.isupper() for c in para) else _END_ANY_CASE
        for m in pattern.finditer(para):
            before = para[start:m.start(1)].rsplit(None, 1)
            last_word = before[-1].lower().rstrip(".") if before else ""
            if last_word in _ABBREVIATIONS or (len(last_word) == 1 and last_word.isalpha()):
                continue
            sent = para[start:m.end(1)].strip()
            if sent:
                out.append(sent)
            start = m.end()
        tail = para[start:].strip()
        if tail:
            out.append(tail)
    return out


# an answer's sentence ends after . ! ? and whitespace, or at a line break
ANSWER_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")
_LEADING_MARKERS = re.compile(r"^(?:\[\s*\d{1,4}(?:\s*,\s*\d{1,4})*\s*\]\s*)+")


def split_answer_sentences(text: str) -> list[str]:
    """Sentences, each with its markers: in "X. [1] Y." the [1] belongs to X (the extractive
    answers and many models put the marker after the full stop)."""
    out: list[str] = []
    for piece in (s.strip() for s in ANSWER_SENTENCE_END.split(text) if s and s.strip()):
        m = _LEADING_MARKERS.match(piece)
        if m and out:
            out[-1] = f"{out[-1]} {m.group(0).strip()}"
            piece = piece[m.end():].strip()
        if piece:
            out.append(piece)
    return out
