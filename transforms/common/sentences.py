"""Sentence splitting shared by the chunker, the reranker and the extractive answerer."""
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
