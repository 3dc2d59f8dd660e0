"""PDF -> Document: the text layer page by page, outline entries as heading paths."""
from __future__ import annotations

import io
import logging
import re
from typing import Optional

import pypdf

from transforms.ingest.parse.base import ParseError, file_stem, make_document
from transforms.ingest.parse.limits import (ParseLimits, check_inflated, check_text, is_limit_error,
                                            pypdf_limits, text_chars)
from transforms.ingest.parse.ocr import OcrSettings, ocr_metadata, ocr_pdf
from transforms.records import Document, RawObject, Section

# pypdf logs a warning per font/object it has to work around; a corpus run would drown in them.
logging.getLogger("pypdf").setLevel(logging.ERROR)

_SPACES = re.compile(r"[ \t\u00a0]+")
_HYPHEN = re.compile(r"([a-z])-\n([a-z])")
_SQUASH = re.compile(r"\W+")


def _key(s: str) -> str:
    # Compare titles ignoring spacing and punctuation: extracted text often loses spaces.
    return _SQUASH.sub("", s).lower()


def _outline(reader: pypdf.PdfReader) -> list[tuple[int, list[str]]]:
    """Flattened outline: (0-based page, heading path), in document order."""
    entries: list[tuple[int, list[str]]] = []

    def visit(items, path: list[str]) -> None:
        last: Optional[list[str]] = None
        for item in items:
            if isinstance(item, list):
                if last is not None:
                    visit(item, last)
                continue
            try:
                title = " ".join(str(item.title or "").split())
                page = reader.get_destination_page_number(item)
            except Exception:  # a broken bookmark should not sink the document
                continue
            last = path + [title]
            if page is not None and page >= 0 and title:
                entries.append((page, last))

    try:
        visit(reader.outline, [])
    except Exception:
        return []
    entries.sort(key=lambda e: e[0])  # stable: keeps document order within a page
    return entries


def _clean(text: str) -> str:
    text = _HYPHEN.sub(r"\1\2", text.replace("\r", "\n"))
    lines = [_SPACES.sub(" ", line).strip() for line in text.split("\n")]
    return "\n".join(lines).strip()


def _split_page(text: str, current: list[str], entries: list[list[str]]
                ) -> tuple[list[tuple[list[str], str]], list[str]]:
    """Split one page's text where its outline entries' titles appear."""
    lines = text.split("\n")
    parts: list[tuple[list[str], str]] = []
    start, path = 0, current
    for entry in entries:
        want = _key(entry[-1])
        hit = None
        for j in range(start, len(lines)):
            k = _key(lines[j])
            # Exact, or behind a section number ("1.3.1 Customization of MC"), or
            # followed by more text on the same line.
            if want and k and (k == want or (k.endswith(want) and len(k) - len(want) <= 8)
                               or (k.startswith(want) and len(want) >= 6)):
                hit = j
                break
        if hit is None:  # title not found in the text: assume the entry starts here
            hit = start
        if hit > start:
            parts.append((path, "\n".join(lines[start:hit])))
        start, path = hit, entry
    parts.append((path, "\n".join(lines[start:])))
    return parts, path


def parse_pdf(raw: RawObject, source_uris: Optional[list[str]] = None,
              ocr: Optional[OcrSettings] = None, limits: Optional[ParseLimits] = None) -> list[Document]:
    return parse_pdf_with_errors(raw, source_uris, ocr, limits)[0]


def parse_pdf_with_errors(raw: RawObject, source_uris: Optional[list[str]] = None,
                          ocr: Optional[OcrSettings] = None, limits: Optional[ParseLimits] = None
                          ) -> tuple[list[Document], list[str]]:
    """(documents, per-page problems such as "page 3: OCR confidence 0.41 below 0.75").

    A file whose streams inflate past limits.max_inflated_bytes, or whose text is longer than
    limits.max_text_chars, is refused (ParseError) before it can take the memory (limits.py)."""
    limits = limits or ParseLimits()
    check_inflated(raw.data, limits)  # before pypdf or PDFium inflates anything
    with pypdf_limits(limits):
        return _parse_pdf(raw, source_uris, ocr, limits)


def _limit_reached(e: BaseException, limits: ParseLimits) -> ParseError:
    return ParseError(f"PDF stream inflates to more than parse.max_inflated_bytes="
                      f"{limits.max_inflated_bytes} ({str(e)[:100]})")


def _parse_pdf(raw: RawObject, source_uris: Optional[list[str]], ocr: Optional[OcrSettings],
               limits: ParseLimits) -> tuple[list[Document], list[str]]:
    try:
        reader = pypdf.PdfReader(io.BytesIO(raw.data), strict=False)
        if reader.is_encrypted:
            try:
                ok = reader.decrypt("")
            except Exception as e:
                raise ParseError(f"encrypted PDF: {type(e).__name__}: {e}") from e
            if not ok:
                raise ParseError("encrypted PDF: needs a password")
        pages = reader.pages
        n_pages = len(pages)
    except ParseError:
        raise
    except Exception as e:
        if is_limit_error(e):
            raise _limit_reached(e, limits) from e
        raise ParseError(f"unreadable PDF: {type(e).__name__}: {e}") from e
    if n_pages == 0:
        raise ParseError("unreadable PDF: no pages")

    outline = _outline(reader)
    by_page: dict[int, list[list[str]]] = {}
    for page_no, path in outline:
        by_page.setdefault(page_no, []).append(path)

    layers: list[Optional[str]] = []
    chars = 0
    for page in pages:
        try:
            layers.append(_clean(page.extract_text() or ""))
        except Exception as e:  # one bad page: keep the rest; a stream past the cap: refuse the file
            if is_limit_error(e):  # (PDFium, reading the page for OCR, would inflate it whole)
                raise _limit_reached(e, limits) from e
            layers.append(None)
        chars += len(layers[-1] or "")
        check_text(chars, limits)
    read = ocr_pdf(raw.data, layers, ocr or OcrSettings())  # scanned pages; never raises per page
    errors = [f"page {i + 1}: {reason}" for i, reason in sorted(read.errors.items())]

    sections: list[Section] = []
    current: list[str] = []
    failed = 0
    for idx, layer in enumerate(layers):
        text = _clean(read.pages[idx].text) if idx in read.pages else layer
        if text is None:
            failed += 1
            continue
        parts, current = _split_page(text, current, by_page.get(idx, []))
        for path, part in parts:
            if part.strip():
                sections.append(Section(heading_path=list(path), text=part.strip(), page=idx + 1))
    if failed == n_pages:
        raise ParseError("unreadable PDF: no page could be read" + _first(errors))

    meta: dict = {"pages": n_pages, "outline_entries": len(outline)}
    meta.update(ocr_metadata(read))
    title = ""
    try:
        info = reader.metadata or {}
        title = " ".join(str(info.get("/Title") or "").split())
        for k, name in (("/Author", "author"), ("/Subject", "subject"), ("/Producer", "producer")):
            if info.get(k):
                meta[name] = " ".join(str(info[k]).split())[:200]
    except Exception:
        pass
    if not title and sections:
        title = next((ln for ln in sections[0].text.split("\n") if ln.strip()), "")[:200]
    if not any(s.text.strip() for s in sections):
        raise ParseError("no text extracted" + _first(errors))
    check_text(text_chars(sections), limits)  # OCR'd pages count too
    return [make_document(raw, "pdf", title or file_stem(raw.key), sections, source_uris, meta)], errors


def _first(errors: list[str]) -> str:
    return f" ({errors[0]}" + (f"; +{len(errors) - 1} more)" if len(errors) > 1 else ")") if errors else ""
