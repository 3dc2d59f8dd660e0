"""Raw bytes -> Documents: sniff the format from the content, then dispatch.

Plain functions, no Beam. Every failure comes out as ParseError with a short reason,
so the pipeline can dead-letter it.
"""
from __future__ import annotations

import json
import posixpath
import re
from typing import Callable, Optional

from transforms.parse.base import ParseError
from transforms.records import Document, RawObject

PARSER_VERSION = "1"  # bump whenever parser output changes (forces re-indexing)

__all__ = ["PARSER_VERSION", "ParseError", "sniff_format", "parse_object",
           "parse_object_with_errors"]

_MAN_EXT = re.compile(r"\.[1-9](?:[a-z]{1,6})?$")  # .1 .3 .3type .3const .2type .3head .8
_ROFF_LINE = re.compile(r"^(?:\.(?:TH|SH|SS|PP|LP|TP|IP|B|I|BR|IR|so|nf|\\\")\b|'\\\"|\\\")",
                        re.MULTILINE)
_ROFF_FIRST = re.compile(r"^(?:\.TH\s|'\\\"|\.\\\"|\\\"|\.so\s)")
_MARKUP = re.compile(r"^<(?:!doctype|html|head|body|\?xml|!--|[a-z][a-z0-9]*[\s>])", re.I)


def _ext(key: str) -> str:
    base = posixpath.basename(key).lower()
    return base[base.rfind("."):] if "." in base else ""


def _looks_binary(head: bytes) -> bool:
    if b"\x00" in head:
        return True
    # Control characters other than tab/newline/CR/FF/ESC/backspace: not text.
    ctrl = sum(1 for b in head if b < 32 and b not in (9, 10, 12, 13, 27, 8))
    return len(head) > 0 and ctrl / len(head) > 0.05


def sniff_format(key: str, data: bytes) -> str:
    """html | pdf | man | jsonl | markdown | text, judged from the bytes first; or 'binary'."""
    if b"%PDF-" in data[:1024]:
        return "pdf"
    head = data[:8192]
    if _looks_binary(head):
        return "binary"
    text = head.decode("utf-8", errors="replace").lstrip("\ufeff \t\r\n")
    low = text[:2048].lower()
    ext = _ext(key)
    if low.startswith(("<!doctype html", "<html")) or (
            low.startswith("<?xml") and "<html" in low):
        return "html"
    if ext in (".html", ".htm", ".xhtml") and _MARKUP.match(low):
        return "html"
    if _ROFF_FIRST.match(text) or (_MAN_EXT.search(key.lower()) and
                                   len(_ROFF_LINE.findall(text)) >= 2):
        return "man"
    if ext in (".jsonl", ".ndjson"):
        return "jsonl"
    lines = [ln for ln in text.split("\n")[:5] if ln.strip()]
    if lines and ext not in (".md", ".markdown") and all(_is_json_object(ln) for ln in lines):
        return "jsonl"
    if ext in (".md", ".markdown", ".mdown", ".mkd"):
        return "markdown"
    return "text"


def _is_json_object(line: str) -> bool:
    line = line.strip()
    if not (line.startswith("{") and line.endswith("}")):
        return False
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:
        return False


def _parsers() -> dict[str, Callable]:
    # Imported lazily so a worker only loads lxml/pypdf when it meets that format.
    from transforms.parse.html import parse_html
    from transforms.parse.man import parse_man
    from transforms.parse.markdown import parse_markdown
    from transforms.parse.pdf import parse_pdf
    from transforms.parse.text import parse_text
    return {"html": parse_html, "man": parse_man, "markdown": parse_markdown,
            "pdf": parse_pdf, "text": parse_text}


def parse_object_with_errors(raw: RawObject, source_uris: Optional[list[str]] = None,
                             ocr=None) -> tuple[list[Document], list[str]]:
    """(documents, per-record problems). Raises ParseError when nothing usable came out.

    The problems list is only non-empty for JSONL files with some bad lines
    ("line 7: missing id") and PDFs with pages OCR could not read ("page 3: OCR found no
    text"); the pipeline dead-letters those and keeps the documents. `ocr` is a
    transforms.parse.ocr.OcrSettings (None: the defaults, mode auto).
    """
    fmt = sniff_format(raw.key, raw.data)
    if fmt == "binary":
        raise ParseError(f"binary content: {_describe(raw.data)}")
    try:
        if fmt == "jsonl":
            from transforms.parse.jsonl import parse_jsonl
            docs, errors = parse_jsonl(raw, source_uris)
            if not docs:
                first = f" ({errors[0]}" + (f"; +{len(errors) - 1} more)" if len(errors) > 1 else ")") \
                    if errors else ""
                raise ParseError(f"no valid records{first}")
            return docs, errors
        if fmt == "pdf":  # per-page OCR problems come back like bad JSONL lines ("page 3: ...")
            from transforms.parse.pdf import parse_pdf_with_errors
            return parse_pdf_with_errors(raw, source_uris, ocr)
        return _parsers()[fmt](raw, source_uris), []
    except ParseError:
        raise
    except RecursionError as e:
        raise ParseError(f"{fmt}: document nested too deeply ({e})") from e
    except Exception as e:
        msg = str(e).replace("\n", " ")[:200]
        raise ParseError(f"{fmt} parser failed: {type(e).__name__}: {msg}") from e


def parse_object(raw: RawObject, source_uris: Optional[list[str]] = None) -> list[Document]:
    """Documents from one raw object (bad JSONL lines are skipped silently here)."""
    return parse_object_with_errors(raw, source_uris)[0]


def _describe(data: bytes) -> str:
    magic = {b"\x89PNG": "PNG image", b"\xff\xd8\xff": "JPEG image", b"GIF8": "GIF image",
             b"PK\x03\x04": "zip archive", b"\x1f\x8b": "gzip data", b"\x7fELF": "ELF binary"}
    for sig, name in magic.items():
        if data.startswith(sig):
            return name
    return f"{len(data)} bytes, not text"
