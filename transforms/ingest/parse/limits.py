"""What one document may inflate to: `parse.max_text_chars` and `parse.max_inflated_bytes`.

`max_object_bytes` bounds what is read; a 1 MB PDF can still inflate to 1 GiB. So, before any
PDF library sees the file, `check_inflated` inflates its Flate streams in bounded pieces
(output thrown away, so memory stays flat) and refuses the file once they add up to more than
the cap; what it cannot see (encrypted streams, other filters) pypdf's own per-stream limits,
set to the same cap, refuse. `check_text` caps each document's extracted text, any format.
"""
from __future__ import annotations

import re
import zlib
from dataclasses import dataclass
from typing import Iterable

from transforms.ingest.parse.base import ParseError

_STREAM = re.compile(rb"(?<!end)stream\r?\n")
_PIECE = 1 << 16  # compressed bytes fed to zlib at a time
_OUT = 1 << 20  # most inflated bytes zlib may hand back at a time


@dataclass(frozen=True)
class ParseLimits:
    max_text_chars: int = 50_000_000  # a document's extracted text, all sections together
    max_inflated_bytes: int = 256 * 1024 * 1024  # a PDF's Flate streams, inflated, all together


def check_text(chars: int, limits: ParseLimits) -> None:
    if chars > limits.max_text_chars:
        raise ParseError(f"text longer than parse.max_text_chars={limits.max_text_chars}")


# What a file's decoded characters may be, as a multiple of max_text_chars, checked before it
# is parsed (issue 35, item 16): a parser holds several copies of its input, so a file far past
# the cap must be refused before any parser sees it. Text, Markdown and man pages keep about
# every character they decode; HTML keeps its text, not its markup, so it may be larger.
BEFORE_PARSING = {"text": 1, "markdown": 1, "man": 1, "html": 4}
_UTF8_CONTINUATION = bytes(range(0x80, 0xC0))
_COUNT_PIECE = 1 << 18


def utf8_chars(data: bytes) -> int:
    """A lower bound of the characters data decodes to, counted without decoding it (in 256 KiB
    pieces, so memory stays flat): exact for UTF-8 (its continuation bytes start no character),
    less than the cp1252 fallback's one per byte; a CRLF line end counts as one."""
    n = 0
    for start in range(0, len(data), _COUNT_PIECE):
        n += len(data[start:start + _COUNT_PIECE].translate(None, _UTF8_CONTINUATION))
    return n - data.count(b"\r\n") - (1 if data.startswith(b"\xef\xbb\xbf") else 0)


def check_before_parsing(fmt: str, chars: int, limits: ParseLimits) -> None:
    """ParseError when a file of `chars` decoded characters (a lower bound) cannot fit, before it
    is decoded or parsed: text, Markdown and man past max_text_chars, HTML past 4x."""
    factor = BEFORE_PARSING.get(fmt)
    if factor is not None and chars > factor * limits.max_text_chars:
        times = f"{factor} x " if factor > 1 else ""
        raise ParseError(f"text longer than parse.max_text_chars={limits.max_text_chars}: the file holds "
                         f"at least {chars} characters, over {times}the cap, refused before parsing")


def text_chars(sections: Iterable) -> int:
    return sum(len(s.text) for s in sections)


def _inflated(data: bytes, start: int, budget: int) -> tuple[int, int]:
    """(bytes the zlib stream at data[start:] inflates to, stopping once past budget; where its
    compressed bytes end). Not a zlib stream: (0, start)."""
    z = zlib.decompressobj()
    out, pos = 0, start
    try:
        while pos < len(data) and not z.eof and out <= budget:
            piece = data[pos:pos + _PIECE]
            pos += len(piece)
            buf = z.decompress(piece, _OUT)
            out += len(buf)
            while z.unconsumed_tail and not z.eof and out <= budget:
                buf = z.decompress(z.unconsumed_tail, _OUT)
                out += len(buf)
    except zlib.error:
        return (out, pos) if out else (0, start)  # not Flate (DCT, raw, encrypted): not ours to judge
    return out, (pos - len(z.unused_data) - len(z.unconsumed_tail) if z.eof else pos)


def check_inflated(data: bytes, limits: ParseLimits) -> None:
    """ParseError once the PDF's Flate streams inflate to more than max_inflated_bytes."""
    cap, total, pos = limits.max_inflated_bytes, 0, 0
    while True:
        m = _STREAM.search(data, pos)
        if m is None:
            return
        n, end = _inflated(data, m.end(), cap - total)
        total += n
        if total > cap:
            raise ParseError(f"PDF streams inflate to more than parse.max_inflated_bytes={cap}")
        pos = max(end, m.end())


_PYPDF_LIMITS = ("zlib_maximum_output_length", "lzw_maximum_output_length",
                 "run_length_maximum_output_length", "array_based_stream_maximum_output_length",
                 "jbig2_maximum_output_length", "brotli_maximum_output_length")


def pypdf_limits(limits: ParseLimits):
    """A context in which pypdf's per-stream output limits are the cap (pypdf.apply_configuration,
    pypdf >= 7; older pypdf keeps its own 75 MB limits)."""
    import contextlib
    import dataclasses
    import pypdf
    apply = getattr(pypdf, "apply_configuration", None)
    if apply is None:
        return contextlib.nullcontext()
    known = {f.name for f in dataclasses.fields(pypdf.Configuration)}
    return apply(**{k: limits.max_inflated_bytes for k in _PYPDF_LIMITS if k in known})


def is_limit_error(e: BaseException) -> bool:
    """pypdf refused a stream past its output limit (pypdf.errors.LimitReachedError)."""
    return type(e).__name__ == "LimitReachedError"
