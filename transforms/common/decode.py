"""Bytes -> text: the one rule documents and question files share (issue 35, items 13 and 14).

- A byte order mark decides the encoding: UTF-8, UTF-16 (LE/BE) or UTF-32 (LE/BE). Bytes that
  encoding cannot decode raise `DecodeError`, whose message names the encoding ("not valid
  UTF-16-LE text (its byte order mark says UTF-16-LE): truncated data at byte 9"); the text does
  not fall back to anything else, so a corrupt UTF-16 file is refused, not read as garbage.
- Without a mark: UTF-8 when the bytes decode as UTF-8, else Windows-1252 (cp1252), the encoding
  of most non-UTF-8 text in the wild, in which 0x80-0x9F are letters and punctuation (€, curly
  quotes, dashes). The five bytes cp1252 leaves undefined (81 8D 8F 90 9D) become U+FFFD. Latin-1
  would make every one of those 32 bytes a C1 control character.
- `decode_document` never returns a C1 control character (U+0080-U+009F): one in UTF-8 or
  UTF-16 text is read as the cp1252 character of the same byte (text that was decoded as Latin-1
  once and saved again), so no control character reaches chunks, answers or citations.

`bom_encoding` is cheap (the first four bytes) so callers can refuse a file by its mark before
reading it (question files are read in byte ranges cut at b"\\n", which a UTF-16 file does not
have).
"""
from __future__ import annotations

import codecs
import re
from typing import Optional

# Longest first: the UTF-32-LE mark starts with the UTF-16-LE one.
_BOMS = ((codecs.BOM_UTF32_LE, "UTF-32-LE"), (codecs.BOM_UTF32_BE, "UTF-32-BE"),
         (codecs.BOM_UTF8, "UTF-8"), (codecs.BOM_UTF16_LE, "UTF-16-LE"), (codecs.BOM_UTF16_BE, "UTF-16-BE"))
WIDE = ("UTF-16-LE", "UTF-16-BE", "UTF-32-LE", "UTF-32-BE")  # encodings whose text holds NUL bytes

_C1 = re.compile("[\u0080-\u009f]")
_C1_AS_CP1252 = {chr(b): bytes([b]).decode("cp1252", errors="replace") for b in range(0x80, 0xA0)}


class DecodeError(ValueError):
    """Text its byte order mark's encoding cannot decode; the message names the encoding."""


def bom_encoding(data: bytes) -> Optional[str]:
    """'UTF-8', 'UTF-16-LE', 'UTF-16-BE', 'UTF-32-LE' or 'UTF-32-BE' when data starts with that
    byte order mark; None without one."""
    for bom, name in _BOMS:
        if data.startswith(bom):
            return name
    return None


def bom_length(encoding: Optional[str]) -> int:
    return {"UTF-8": 3, "UTF-16-LE": 2, "UTF-16-BE": 2, "UTF-32-LE": 4, "UTF-32-BE": 4}.get(encoding or "", 0)


def _decode_marked(data: bytes, encoding: str) -> str:
    body = memoryview(data)[bom_length(encoding):]
    try:
        return codecs.decode(body, encoding.lower()).rstrip("\x00")  # NUL padding at the end: no text
    except UnicodeDecodeError as e:
        if encoding == "UTF-32-LE":  # FF FE 00 00 may be UTF-16-LE text starting with U+0000
            try:
                return codecs.decode(memoryview(data)[2:], "utf-16-le").strip("\x00")
            except UnicodeDecodeError:
                pass
        at = e.start + bom_length(encoding)
        raise DecodeError(f"not valid {encoding} text (its byte order mark says {encoding}): "
                          f"{e.reason} at byte {at}") from None


def decode_lenient(data: bytes) -> str:
    """Bytes without a byte order mark: UTF-8 if they decode, else cp1252 (undefined bytes U+FFFD).
    Never a C1 control character that was not in valid UTF-8 input."""
    try:
        return codecs.decode(data, "utf-8")
    except UnicodeDecodeError:
        return codecs.decode(data, "cp1252", errors="replace")


def decode_bytes(data: bytes) -> str:
    """The text of data: by its byte order mark (stripped), else UTF-8, else cp1252.
    DecodeError when a mark's encoding cannot decode the rest."""
    encoding = bom_encoding(data)
    if encoding is None:
        return decode_lenient(data)
    return _decode_marked(data, encoding)


def without_c1(text: str) -> str:
    """C1 control characters read as the cp1252 characters of the same byte."""
    if not _C1.search(text):
        return text
    return _C1.sub(lambda m: _C1_AS_CP1252[m.group(0)], text)


def decode_document(data: bytes) -> str:
    """A document's text: decode_bytes, without C1 control characters. DecodeError as there."""
    return without_c1(decode_bytes(data))
