"""A memory measurement kept out of the unit tier (tracemalloc over 70,000 paragraphs, 10-20 s): a
Markdown file of tiny paragraphs parsed a piece at a time peaks at a small multiple of its size."""
from __future__ import annotations

import tracemalloc

from tests.unit.test_markdown_pieces import md, raw, text_of


def test_memory_for_a_file_of_tiny_paragraphs_stays_a_small_multiple_of_its_size(monkeypatch):
    # markdown-it's tokens for one-word paragraphs take ~175x the text: a whole parse of this file
    # peaks near 175 x 0.55 MB (96 MB); in 64 KiB pieces, one piece's tokens and the sections (~40x)
    monkeypatch.setattr(md, "PIECE_CHARS", 64 << 10)
    body = "".join(f"p{i}\n\n" for i in range(70_000))  # 0.6 MB
    tracemalloc.start()
    try:
        doc = md.parse_markdown(raw(body))[0]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert "p69999" in text_of(doc) and "p0" in text_of(doc)
    assert peak < 60 * len(body), (peak, len(body))
