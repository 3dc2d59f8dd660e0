"""Raw bytes -> Documents: sniff the format from the content, then dispatch.

The stage function is `parse_unique` (plain, no Beam; every failure comes out as
ParseError with a short reason); `ParseFn`/`ParseObjects` are its Beam wrapper
(transforms/common/stage.py), which dead-letters failures.
"""
from __future__ import annotations

import dataclasses
import json
import posixpath
import re
from typing import Callable, Optional

import apache_beam as beam

from transforms.common.counters import DEAD_LETTER
from transforms.common.fault_injection import drop_point
from transforms.common.stage import Outputs, StageFn
from transforms.ingest.parse.base import ParseError
from transforms.ingest.parse.limits import ParseLimits, check_text, text_chars
from transforms.records import Document, RawObject, UniqueObject

PARSER_VERSION = "3"  # bump whenever parser output changes (forces re-indexing); 2: OCR of scanned pages;
# 3: a JSONL record's doc_id is "<record id>@<12 hex of its file's key>", and HTML nested past
# libxml2's depth limit is read to its end (issue 20)

__all__ = ["PARSER_VERSION", "ParseError", "sniff_format", "parse_object",
           "parse_object_with_errors", "acl_for", "parse_unique", "ParseFn", "ParseObjects"]

AclRules = tuple[tuple[str, tuple[str, ...]], ...]  # (key prefix, groups)

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
    from transforms.ingest.parse.html import parse_html
    from transforms.ingest.parse.man import parse_man
    from transforms.ingest.parse.markdown import parse_markdown
    from transforms.ingest.parse.pdf import parse_pdf
    from transforms.ingest.parse.text import parse_text
    return {"html": parse_html, "man": parse_man, "markdown": parse_markdown,
            "pdf": parse_pdf, "text": parse_text}


def parse_object_with_errors(raw: RawObject, source_uris: Optional[list[str]] = None,
                             ocr=None, limits: Optional[ParseLimits] = None
                             ) -> tuple[list[Document], list[str]]:
    """(documents, per-record problems). Raises ParseError when nothing usable came out.

    The problems list is only non-empty for JSONL files with some bad lines
    ("line 7: missing id") and PDFs with pages OCR could not read ("page 3: OCR found no
    text"); the pipeline dead-letters those and keeps the documents. `ocr` is a
    transforms.ingest.parse.ocr.OcrSettings (None: the defaults, mode auto). `limits`: what one
    document may inflate to (limits.ParseLimits; None: the defaults); a JSONL record past
    max_text_chars is a bad line, any other document past it a ParseError.
    """
    limits = limits or ParseLimits()
    fmt = sniff_format(raw.key, raw.data)
    if fmt == "binary":
        raise ParseError(f"binary content: {_describe(raw.data)}")
    try:
        if fmt == "jsonl":
            from transforms.ingest.parse.jsonl import parse_jsonl
            docs, errors = parse_jsonl(raw, source_uris, limits)
            if not docs:
                first = f" ({errors[0]}" + (f"; +{len(errors) - 1} more)" if len(errors) > 1 else ")") \
                    if errors else ""
                raise ParseError(f"no valid records{first}")
            return docs, errors
        if fmt == "pdf":  # per-page OCR problems come back like bad JSONL lines ("page 3: ...")
            from transforms.ingest.parse.pdf import parse_pdf_with_errors
            return parse_pdf_with_errors(raw, source_uris, ocr, limits)
        docs = _parsers()[fmt](raw, source_uris)
        for doc in docs:
            check_text(text_chars(doc.sections), limits)
        return docs, []
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


# --- the parse stage ------------------------------------------------------------------

def acl_for(uri: str, key: str, acl_rules: AclRules, root: Optional[str] = None) -> Optional[list[str]]:
    """What the config's `acl:` rules allow for this path (transforms.ingest.acl: matched
    independently of where the listing started; None when no rule matches)."""
    from transforms.ingest.acl import path_groups
    return path_groups(uri, key, acl_rules, root)


def parse_unique(unique: UniqueObject, acl_rules: AclRules = (), acl_root: Optional[str] = None,
                 ocr=None, limits: Optional[ParseLimits] = None) -> tuple[list[Document], list[str]]:
    """The parse stage function: one distinct content -> (documents, bad-record reasons).

    Documents carry the file's hash as `source_hash` and the groups the config's `acl:`
    rules give the representative path; a record's own `acl` may only narrow them.
    Raises ParseError when nothing usable came out."""
    from transforms.ingest.acl import effective_acl
    raw = unique.raw
    docs, line_errors = parse_object_with_errors(raw, list(unique.source_uris), ocr, limits)
    allowed = acl_for(raw.uri, raw.key, acl_rules, acl_root)
    out = []
    for doc in docs:
        doc = dataclasses.replace(doc, source_hash=raw.content_hash,
                                  acl=effective_acl(allowed, doc.acl))  # a record only narrows
        out.append(doc)
    return out, line_errors


class ParseFn(StageFn):
    """Emits Documents; unparseable objects (and bad JSONL lines) go to DEAD_LETTER with the reason."""
    STAGE, FAILED = "parse", "dead_lettered_parse"

    def __init__(self, acl_rules: AclRules = (), acl_root: Optional[str] = None, ocr=None,
                 limits: Optional[ParseLimits] = None):
        self.acl_rules = acl_rules  # (key prefix, groups): what a path allows (transforms.ingest.acl)
        self.acl_root = acl_root
        self.ocr = ocr  # transforms.ingest.parse.ocr.OcrSettings (None: defaults, mode auto)
        self.limits = limits  # limits.ParseLimits (None: defaults)

    def origin(self, unique: UniqueObject) -> tuple[str, str]:
        return unique.raw.uri, unique.raw.content_hash

    def reason(self, error: Exception) -> str:
        # ParseError reasons are already short and name the format; anything else is a parser bug
        return str(error) if isinstance(error, ParseError) else f"{type(error).__name__}: {error}"

    def apply(self, unique: UniqueObject, out: Outputs) -> None:
        if drop_point("parse", unique.raw.uri):  # the reconciliation tests' lost element
            return
        docs, line_errors = parse_unique(unique, self.acl_rules, self.acl_root, self.ocr, self.limits)
        out.count("parsed_objects")
        out.note_progress("documents parsed")
        for reason in line_errors:  # a bad JSONL line, or a PDF page OCR could not read
            out.count("dead_lettered_pages" if reason.startswith("page ") else "dead_lettered_lines")
            out.dead_letter(reason)
        for doc in docs:
            out.count("documents")
            out.emit(doc)


class ParseObjects(beam.PTransform):
    """PCollection[UniqueObject] -> outputs `documents` (Document) and DEAD_LETTER (DeadLetter).

    Example:
        parsed = uniques | "Parse" >> ParseObjects(acl_rules=(("private/", ("staff",)),))
        parsed.documents | ...      # Document
        parsed[DEAD_LETTER] | ...   # DeadLetter(uri, hash, "parse", reason), one per bad JSONL line too
    """

    def __init__(self, acl_rules: AclRules = (), acl_root: Optional[str] = None, ocr=None,
                 limits: Optional[ParseLimits] = None):
        super().__init__()
        self.acl_rules, self.acl_root, self.ocr, self.limits = acl_rules, acl_root, ocr, limits

    def expand(self, uniques):
        return (uniques
                | "ParseObjects" >> beam.ParDo(ParseFn(self.acl_rules, self.acl_root, self.ocr, self.limits))
                .with_output_types(Document).with_outputs(DEAD_LETTER, main="documents"))
