"""A long Markdown file is parsed a piece at a time (markdown-it's tokens take ~140x their text):
the same document as one parse for ordinary files, the same text for long ones, bounded memory."""
from __future__ import annotations


import pytest
from hypothesis import given, settings, strategies as st

from transforms.ingest.parse.base import ParseError

from transforms.ingest.parse import markdown as md
from transforms.records import RawObject

DOC = """---
title: Pieces
---
# Intro

First paragraph with `code` and a [link](x).

## Lists

- one
- two

  continued item

1. first
2. second

```python
def f():

    return 1
```

| a | b |
|---|---|
| 1 | 2 |

### Tail

Last words.
"""


def raw(text: str, key: str = "docs/p.md") -> RawObject:
    return RawObject.from_bytes(f"file:///{key}", key, text.encode())


def text_of(doc) -> str:
    return "\n".join(s.text for s in doc.sections)


def test_pieces_cut_at_blank_lines_outside_fences_and_keep_every_character():
    body = DOC * 50
    parts = list(md.pieces(body, size=300))
    assert len(parts) > 10 and "".join(parts) == body
    for p in parts[:-1]:
        assert p.endswith("\n\n") or p.endswith("\n \n") or p.split("\n")[-2].strip() == ""
        # never inside a fence: each piece opens and closes its fences
        assert sum(1 for ln in p.splitlines() if ln.startswith("```")) % 2 == 0


def test_a_file_shorter_than_a_piece_is_parsed_exactly_as_before():
    assert list(md.pieces(DOC)) == [DOC]


def test_a_long_file_keeps_its_text_and_structure_when_parsed_in_pieces(monkeypatch):
    body = DOC.split("---\n", 2)[2] * 40
    whole = md.parse_markdown(raw(body))[0]
    monkeypatch.setattr(md, "PIECE_CHARS", 500)
    pieced = md.parse_markdown(raw(body))[0]
    assert text_of(pieced) == text_of(whole)
    assert [s.heading_path for s in pieced.sections] == [s.heading_path for s in whole.sections]


def words_of(doc) -> set:
    text = " ".join([doc.title] + [s.text for s in doc.sections] + [" ".join(s.heading_path) for s in doc.sections])
    return {w for w in text.replace("|", " ").split() if w.isalpha()}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["# Head", "## Sub", "text line", "", "- item", "```", "code", "| cell | other |",
                                 "|---|---|", "1. one", "    indented", "~~~", "> quoted"]), max_size=80),
       st.integers(10, 200))
def test_any_markdown_in_pieces_keeps_every_character_and_word(lines, size):
    body = "\n".join(lines) + "\n"
    assert "".join(md.pieces(body, size)) == body
    try:
        whole = md.parse_markdown(raw(body))[0]
    except ParseError:  # no text at all: so must the pieces say
        whole = None
    saved, md.PIECE_CHARS = md.PIECE_CHARS, size
    try:
        if whole is None:
            with pytest.raises(ParseError):
                md.parse_markdown(raw(body))
            return
        pieced = md.parse_markdown(raw(body))[0]
    finally:
        md.PIECE_CHARS = saved
    assert words_of(whole) <= words_of(pieced)
