"""Shared pieces of the parsers: the error type, decoding, and Document assembly.

Kept apart from __init__ so format modules can import it without a cycle.
"""
from __future__ import annotations

import dataclasses
import posixpath
import re
from typing import Any, Iterable, Optional

from transforms.records import Document, RawObject, Section, stable_id


class ParseError(Exception):
    """A document that cannot be turned into text; the message is the reason."""


_WS = re.compile(r"[ \t\r\f\v\u00a0\u2000-\u200b\u3000]+")
_BLANKS = re.compile(r"\n{3,}")


def norm_ws(s: str) -> str:
    """Collapse runs of whitespace (newlines included) to one space."""
    return _WS.sub(" ", s.replace("\n", " ")).strip()


def norm_lines(s: str) -> str:
    """Collapse spaces inside each line but keep the line breaks (for <br>, .br)."""
    lines = [_WS.sub(" ", line).strip() for line in s.split("\n")]
    return _BLANKS.sub("\n\n", "\n".join(lines)).strip()


def decode_text(data: bytes) -> str:
    """The text of a file (transforms/common/decode.py: by its byte order mark, else UTF-8, else
    cp1252; never a C1 control character); NUL bytes outside UTF-16/32 text mean binary."""
    from transforms.common.decode import WIDE, DecodeError, bom_encoding, decode_document
    encoding = bom_encoding(data)
    if encoding not in WIDE and b"\x00" in data:
        raise ParseError("binary content: NUL bytes")
    try:
        text = decode_document(data)
    except DecodeError as e:
        raise ParseError(str(e)) from None
    if encoding in WIDE and "\x00" in text:
        raise ParseError(f"binary content: NUL characters in {encoding} text")
    return text.replace("\r\n", "\n").replace("\r", "\n")


def file_stem(key: str) -> str:
    base = posixpath.basename(key)
    return base.rsplit(".", 1)[0] if "." in base else base


class SectionBuilder:
    """Accumulates text blocks under the current heading path; drops empty sections."""

    def __init__(self) -> None:
        self.sections: list[Section] = []
        self.path: list[str] = []
        self.blocks: list[str] = []
        self.page: Optional[int] = None

    def add(self, block: str) -> None:
        block = block.strip("\n")
        if block.strip():
            self.blocks.append(block)

    def flush(self) -> None:
        if self.blocks:
            self.sections.append(Section(heading_path=list(self.path),
                                         text="\n\n".join(self.blocks), page=self.page))
        self.blocks = []

    def start(self, path: list[str], page: Optional[int] = None) -> None:
        self.flush()
        self.path = [p for p in path if p]
        self.page = page

    def finish(self) -> list[Section]:
        self.flush()
        return self.sections


class HeadingStack:
    """Maps (level, text) headings to the enclosing-heading path."""

    def __init__(self) -> None:
        self.stack: list[tuple[int, str]] = []

    def push(self, level: int, text: str) -> list[str]:
        while self.stack and self.stack[-1][0] >= level:
            self.stack.pop()
        self.stack.append((level, text))
        return [t for _, t in self.stack]


def make_document(raw: RawObject, fmt: str, title: str, sections: Iterable[Section],
                  source_uris: Optional[list[str]], metadata: Optional[dict[str, Any]] = None,
                  *, doc_id: Optional[str] = None, content_hash: Optional[str] = None,
                  acl: Optional[list[str]] = None) -> Document:
    """One Document with the fields every format shares; no text -> ParseError. No C1 control
    character survives, whatever put it there (a JSON "\\u0093", a roff \\N'147'): it is the cp1252
    character of that byte (transforms/common/decode.py)."""
    from transforms.common.decode import without_c1
    kept = [dataclasses.replace(s, heading_path=[without_c1(h) for h in s.heading_path], text=without_c1(s.text))
            for s in sections if s.text and s.text.strip()]
    if not kept:
        raise ParseError("no text extracted")
    title = without_c1(title or "")
    meta = {"format": fmt, "key": raw.key}
    meta.update(metadata or {})
    return Document(
        doc_id=doc_id or stable_id("doc", raw.key),
        content_hash=content_hash or raw.content_hash,
        source_uri=raw.uri,
        key=raw.key,
        format=fmt,
        title=(title or "").strip()[:300],
        sections=kept,
        source_uris=list(source_uris or [raw.uri]),
        metadata=meta,
        acl=list(acl or []),
        size=raw.size,
        mtime=raw.mtime,
        source_hash=raw.content_hash,  # the whole file's hash, even for a JSONL record
    )
