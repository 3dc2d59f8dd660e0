"""JSONL records -> one Document per line; bad lines are reported, not fatal."""
from __future__ import annotations

import json
from typing import Iterator, Optional, Union

from transforms.common.decode import decode_lenient, without_c1
from transforms.ingest.parse.base import ParseError, make_document, norm_lines
from transforms.ingest.parse.limits import ParseLimits, check_text
from transforms.records import Document, RawObject, Section, record_doc_id, sha256_hex

_RESERVED = {"id", "_id", "title", "text", "acl"}


def _record(raw: RawObject, line: bytes, source_uris: Optional[list[str]],
            limits: ParseLimits) -> Document:
    try:  # a line that is not UTF-8 is read as cp1252, like any text (transforms/common/decode.py)
        rec = json.loads(without_c1(decode_lenient(line)))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ParseError(f"invalid JSON: {e.msg if hasattr(e, 'msg') else e}") from e
    if not isinstance(rec, dict):
        raise ParseError(f"not a JSON object: {type(rec).__name__}")
    rid = rec.get("id", rec.get("_id"))
    if rid is None or (isinstance(rid, str) and not rid.strip()) or isinstance(rid, (dict, list)):
        raise ParseError("missing id")
    text = rec.get("text")
    if not isinstance(text, str):
        raise ParseError("missing text" if text is None else "text is not a string")
    if not text.strip():
        raise ParseError("no text extracted")
    check_text(len(text), limits)  # a record is one document: the same cap as a file
    acl = rec.get("acl") or []
    if not isinstance(acl, list) or not all(isinstance(a, str) for a in acl):
        raise ParseError("acl must be a list of strings")
    title = rec.get("title")
    title = str(title).strip() if title not in (None, "") else str(rid)
    meta = {k: v for k, v in rec.items() if k not in _RESERVED}
    meta["record_id"] = str(rid)  # the record's own id, as users and eval labels name it
    # Paragraph structure is kept; whitespace inside paragraphs is normalised.
    paras = [norm_lines(p) for p in text.replace("\r\n", "\n").split("\n\n")]
    body = "\n\n".join(p for p in paras if p)
    return make_document(raw, "jsonl", title, [Section([], body)], source_uris, meta,
                         doc_id=record_doc_id(raw.key, str(rid)), content_hash=sha256_hex(line), acl=acl)


def parse_jsonl(raw: RawObject, source_uris: Optional[list[str]] = None,
                limits: Optional[ParseLimits] = None) -> tuple[list[Document], list[str]]:
    """(documents, per-line problems such as "line 7: missing id")."""
    docs: list[Document] = []
    errors: list[str] = []
    for item in iter_jsonl(raw, source_uris, limits):
        (errors if isinstance(item, str) else docs).append(item)
    return docs, errors


def _lines(data: bytes) -> Iterator[tuple[int, bytes]]:
    """(line number, line) cut at b"\\n", one line copied at a time (not data.split: a copy of
    the whole file as a million small bytes objects)."""
    start, n, size = (3 if data.startswith(b"\xef\xbb\xbf") else 0), 1, len(data)
    while start < size:
        end = data.find(b"\n", start)
        end = size if end < 0 else end
        yield n, data[start:end]
        start, n = end + 1, n + 1


def iter_jsonl(raw: RawObject, source_uris: Optional[list[str]] = None,
               limits: Optional[ParseLimits] = None) -> Iterator[Union[Document, str]]:
    """Each record's Document, or a bad line's reason ("line 7: missing id"), in file order."""
    seen: dict[str, int] = {}
    limits = limits or ParseLimits()
    for n, line in _lines(raw.data):
        line = line.rstrip(b"\r")
        if not line.strip():
            continue
        try:
            doc = _record(raw, line, source_uris, limits)
        except ParseError as e:
            yield f"line {n}: {e}"
            continue
        except Exception as e:  # never let one odd record sink the file
            yield f"line {n}: {type(e).__name__}: {e}"
            continue
        if doc.doc_id in seen:
            rid = doc.metadata["record_id"]
            yield f"line {n}: duplicate id {rid!r} (first on line {seen[doc.doc_id]})"
            continue
        seen[doc.doc_id] = n
        yield doc
