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
from typing import Callable, Iterator, Optional, Union

import apache_beam as beam

from transforms.common.counters import DEAD_LETTER
from transforms.common.fault_injection import drop_point
from transforms.common.stage import Outputs, StageFn
from transforms.ingest.parse.base import ParseError
from transforms.ingest.parse.limits import ParseLimits, check_before_parsing, check_text, text_chars, utf8_chars
from transforms.records import Document, RawObject, UniqueObject

PARSER_VERSION = "4"  # bump whenever parser output changes (forces re-indexing); 2: OCR of scanned pages;
# 3: a JSONL record's doc_id is "<record id>@<12 hex of its file's key>", and HTML nested past
# libxml2's depth limit is read to its end (issue 20); 4: UTF-16/32 text read by its byte order
# mark, cp1252 (not Latin-1) for text that is not UTF-8, no C1 controls, man pages keep the text
# after an unterminated .de or \{ (issue 35)

__all__ = ["PARSER_VERSION", "ParseError", "sniff_format", "parse_object", "parse_object_with_errors",
           "iter_parse_object", "acl_for", "parse_unique", "iter_parse_unique", "ParseFn", "ParseObjects"]

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
    docs: list[Document] = []
    errors: list[str] = []
    for item in iter_parse_object(raw, source_uris, ocr, limits):
        (errors if isinstance(item, str) else docs).append(item)
    return docs, errors


def iter_parse_object(raw: RawObject, source_uris: Optional[list[str]] = None, ocr=None,
                      limits: Optional[ParseLimits] = None) -> Iterator[Union[Document, str]]:
    """parse_object_with_errors one item at a time: each Document, or a bad record's reason (a
    str), as it is made, so a JSONL file of a million records is never held as a million
    Documents. Raises ParseError (when nothing usable comes out) before yielding any Document;
    a JSONL file's bad lines before its first good one are held until then."""
    limits = limits or ParseLimits()
    raw = _as_utf8(raw, limits)
    fmt = sniff_format(raw.key, raw.data)
    if fmt == "binary":
        raise ParseError(f"binary content: {_describe(raw.data)}")
    try:
        if fmt == "jsonl":
            from transforms.ingest.parse.jsonl import iter_jsonl
            held: list[str] = []
            found = False
            for item in iter_jsonl(raw, source_uris, limits):
                if found:
                    yield item
                elif isinstance(item, str):
                    held.append(item)
                else:
                    found = True
                    yield from held
                    held = []
                    yield item
            if not found:
                first = f" ({held[0]}" + (f"; +{len(held) - 1} more)" if len(held) > 1 else ")") \
                    if held else ""
                raise ParseError(f"no valid records{first}")
            return
        if fmt == "pdf":  # per-page OCR problems come back like bad JSONL lines ("page 3: ...")
            from transforms.ingest.parse.pdf import parse_pdf_with_errors
            docs, errors = parse_pdf_with_errors(raw, source_uris, ocr, limits)
            yield from docs
            yield from errors
            return
        check_before_parsing(fmt, utf8_chars(raw.data), limits)  # before any copy of the text is made
        docs = _parsers()[fmt](raw, source_uris)
        for doc in docs:
            check_text(text_chars(doc.sections), limits)
        yield from docs
    except ParseError:
        raise
    except RecursionError as e:
        raise ParseError(f"{fmt}: document nested too deeply ({e})") from e
    except Exception as e:
        msg = str(e).replace("\n", " ")[:200]
        raise ParseError(f"{fmt} parser failed: {type(e).__name__}: {msg}") from e


def _as_utf8(raw: RawObject, limits: ParseLimits) -> RawObject:
    """A UTF-16 or UTF-32 file (by its byte order mark) as UTF-8 bytes, so every parser and the
    sniffer read it as they read any text; its hash and size stay the file's. One its mark's
    encoding cannot decode is a ParseError naming the encoding; one whose characters cannot fit
    max_text_chars (times the most any format may hold before parsing) is refused undecoded."""
    from transforms.common.decode import WIDE, DecodeError, bom_encoding, bom_length, decode_document
    encoding = bom_encoding(raw.data)
    if encoding not in WIDE:
        return raw
    body = len(raw.data) - bom_length(encoding)
    check_before_parsing("html", body // 4, limits)  # at least one character per 4 bytes
    try:
        text = decode_document(raw.data)
    except DecodeError as e:
        raise ParseError(str(e)) from None
    if "\x00" in text:
        raise ParseError(f"binary content: NUL characters in {encoding} text")
    return dataclasses.replace(raw, data=text.encode("utf-8"))


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
    docs: list[Document] = []
    errors: list[str] = []
    for item in iter_parse_unique(unique, acl_rules, acl_root, ocr, limits):
        (errors if isinstance(item, str) else docs).append(item)
    return docs, errors


def iter_parse_unique(unique: UniqueObject, acl_rules: AclRules = (), acl_root: Optional[str] = None,
                      ocr=None, limits: Optional[ParseLimits] = None) -> Iterator[Union[Document, str]]:
    """parse_unique one item at a time (iter_parse_object): each Document or bad-record reason."""
    from transforms.ingest.acl import effective_acl
    raw = unique.raw
    allowed = acl_for(raw.uri, raw.key, acl_rules, acl_root)
    for item in iter_parse_object(raw, list(unique.source_uris), ocr, limits):
        if isinstance(item, str):
            yield item
        else:  # a record only narrows
            yield dataclasses.replace(item, source_hash=raw.content_hash, acl=effective_acl(allowed, item.acl))


class ParseFn(StageFn):
    """Emits Documents; unparseable objects (and bad JSONL lines) go to DEAD_LETTER with the reason.

    A file's documents are emitted as they are parsed, not held until the whole file is (a JSONL
    file of a million records would otherwise sit in memory as a million Documents, issue 35 item
    16): until the first document the file can still fail whole (one dead letter, nothing else
    emitted); after it, only bad records can, each its own dead letter."""
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

    def _items(self, unique: UniqueObject):
        return iter_parse_unique(unique, self.acl_rules, self.acl_root, self.ocr, self.limits)

    @staticmethod
    def _put(item, out: Outputs) -> None:
        if isinstance(item, str):  # a bad JSONL line, or a PDF page OCR could not read
            out.count("dead_lettered_pages" if item.startswith("page ") else "dead_lettered_lines")
            out.dead_letter(item)
        else:
            out.count("documents")
            out.emit(item)

    def apply(self, unique: UniqueObject, out: Outputs) -> None:
        if drop_point("parse", unique.raw.uri):  # the reconciliation tests' lost element
            return
        items = list(self._items(unique))
        out.count("parsed_objects")
        out.note_progress("documents parsed")
        for item in items:
            self._put(item, out)

    def process(self, unique: UniqueObject):
        from apache_beam.metrics import Metrics

        from transforms.common.counters import NAMESPACE
        from transforms.records import DeadLetter
        out = Outputs(self.STAGE, self.origin(unique))
        if drop_point("parse", unique.raw.uri):
            return
        items = self._items(unique)
        try:  # up to the first document the file may still fail whole
            for item in items:
                self._put(item, out)
                if not isinstance(item, str):
                    break
        except Exception as e:  # this file's failure, not the run's
            reason = self.reason(e)
            self.on_failure(unique, reason)
            Metrics.counter(NAMESPACE, self.FAILED).inc()
            yield beam.pvalue.TaggedOutput(DEAD_LETTER, DeadLetter(*out.origin, self.STAGE, reason))
            return
        out.count("parsed_objects")
        out.note_progress("documents parsed")
        yield from out.items
        out.items.clear()
        for item in items:  # the rest, one at a time
            self._put(item, out)
            yield from out.items
            out.items.clear()
        for name, n in out.counts.items():
            Metrics.counter(NAMESPACE, name).inc(n)
        self._note_progress(out.progress)


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
