"""Lines of a question file as JSON defines them, read with bounded memory.

A JSONL line ends at "\\n" only: U+2028, U+2029 and U+0085 are legal raw inside JSON strings
(json.dumps(ensure_ascii=False) writes them so) and a bare "\\r" is JSON whitespace, so
str.splitlines() and universal newlines would cut one record in two. Lines are cut from the
bytes with readline(limit), which is linear; a line over the cap is kept only as its head
(for its id) and the rest is skipped in blocks, so it never sits in memory whole.
"""
from __future__ import annotations

import io
import re
from typing import Iterator, NamedTuple, Optional

DEFAULT_MAX_LINE_BYTES = 1024 * 1024
HEAD_BYTES = 4096  # what is kept of an over-long line: enough for a leading id
_SKIP_BLOCK = 1024 * 1024


class RawLine(NamedTuple):
    data: bytes  # the line without its "\n"; for an over-long line, its first HEAD_BYTES
    size: int  # the line's full size in bytes, without its "\n"
    too_long: bool
    quotes: int = 0  # of an over-long line: its '"' count (CSV quoting carries over lines)


def iter_raw_lines(f, max_bytes: int = DEFAULT_MAX_LINE_BYTES) -> Iterator[RawLine]:
    """Every line of the binary stream f (which must have readline(limit)), cut at b"\\n" only."""
    while True:
        line = f.readline(max_bytes + 1)
        if not line:
            return
        if line.endswith(b"\n"):
            yield RawLine(line[:-1], len(line) - 1, False)
        elif len(line) <= max_bytes:  # the last line, without a line end
            yield RawLine(line, len(line), False)
        else:
            head, size, quotes = line[:HEAD_BYTES], len(line), line.count(b'"')
            del line
            while True:  # skip to the line end without holding the line
                block = f.readline(_SKIP_BLOCK)
                size, quotes = size + len(block), quotes + block.count(b'"')
                if not block or block.endswith(b"\n"):
                    break
            yield RawLine(head, size - (1 if block.endswith(b"\n") else 0), True, quotes)


def is_blank(text: str) -> bool:
    """Only JSON whitespace (space, tab, CR): not a record. Other invisible characters are."""
    return not text.strip(" \t\r")


_LEADING_ID = re.compile(rb'\s*\{\s*"(?:id|_id)"\s*:\s*("(?:[^"\\\r\n]|\\.){0,1024}"|-?\d{1,30})\s*[,}]')


def leading_id(head: bytes) -> Optional[str]:
    """The id of an over-long JSONL line when it is the object's first key (found cheaply)."""
    import json
    m = _LEADING_ID.match(head)
    if not m:
        return None
    try:
        value = json.loads(m.group(1).decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        return None
    from transforms.query.questions.validate import has_surrogate
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        return None
    value = str(value)
    return value if value.strip() and not has_surrogate(value) else None


class Window(io.RawIOBase):
    """Bytes [start, end) of a sequential binary stream (a file or an S3 body), closed with it."""

    def __init__(self, stream, length: int):
        self.stream, self.remaining = stream, max(0, length)

    def readable(self):
        return True

    def readinto(self, b):
        n = min(len(b), self.remaining)
        if n <= 0:
            return 0
        data = self.stream.read(n)
        b[:len(data)] = data
        self.remaining -= len(data)
        return len(data)

    def close(self):
        try:
            self.stream.close()
        finally:
            super().close()
