"""OCR of scanned PDF pages (transforms/parse/ocr.py, hooked into transforms/parse/pdf.py).

The scans are made here: a text PDF written by hand (tests/pdf_maker.py) is rendered to
images by PDFium, with scanner-like noise, and rebuilt as an image-only PDF by Pillow.
The OCR models come inside the rapidocr-onnxruntime wheel; nothing is downloaded.
"""
from __future__ import annotations

import os
import time

import pytest

# The `ocr` extra is part of `make test`'s install: a missing package must fail here, not skip.
import pypdfium2  # noqa: E402,F401
import rapidocr_onnxruntime  # noqa: E402,F401

from tests.pdf_maker import (blank_image, image_pdf, join_pdfs, prose_lines,  # noqa: E402
                             render_pages, text_pdf)
from transforms.ingest.parse import ParseError, parse_object_with_errors  # noqa: E402
from transforms.ingest.parse.ocr import (OcrLine, OcrSettings, cer, ocr_metadata, ocr_pdf,  # noqa: E402
                                  page_needs_ocr, reading_order)
from transforms.ingest.parse.pdf import parse_pdf, parse_pdf_with_errors  # noqa: E402
from transforms.index.shards import read_table  # noqa: E402
from transforms.records import RawObject  # noqa: E402

# Measured on this machine (11 pt Helvetica, scanned at 200 dpi with noise, read at 300 dpi):
# CER 0.0008-0.0023 over several pages and settings; at 200 dpi the model drops spaces
# (CER ~0.04), at 150 dpi ~0.11. The bound leaves room for onnxruntime/CPU differences.
MAX_CER = 0.02


def _raw(data: bytes, key: str = "scan.pdf") -> RawObject:
    return RawObject.from_bytes(f"file:///{key}", key, data)


def _scan(lines_per_page: list[list[str]], dpi: int = 200, noise: float = 10.0) -> bytes:
    return image_pdf(render_pages(text_pdf(lines_per_page), dpi=dpi, noise=noise), dpi=dpi)


# --- pure pieces -----------------------------------------------------------------------

def test_reading_order_groups_rows_and_paragraphs():
    def ln(text, x0, y0, x1, y1):
        return OcrLine(text, 0.9, (x0, y0, x1, y1))
    boxes = [  # given out of order; "world" sits 3 px lower than "hello" on the same row
        ln("third row", 10, 200, 200, 230),
        ln("world", 120, 13, 220, 43),
        ln("second row", 10, 50, 200, 80),
        ln("hello", 10, 10, 100, 40),
    ]
    assert reading_order(boxes) == "hello world\nsecond row\n\nthird row"
    assert reading_order([]) == ""


def test_page_needs_ocr_modes():
    auto, off, force = OcrSettings(), OcrSettings(mode="off"), OcrSettings(mode="force")
    assert page_needs_ocr("", 1.0, auto)
    assert page_needs_ocr(None, 0.9, auto)  # text extraction failed, a full-page image
    assert not page_needs_ocr("", 0.05, auto)  # a logo on an empty page is not a scan
    assert not page_needs_ocr("x" * 200, 1.0, auto)  # a searchable scan keeps its text layer
    assert not page_needs_ocr("", 1.0, off)
    assert page_needs_ocr("x" * 200, 0.0, force)
    with pytest.raises(ValueError):
        OcrSettings(mode="sometimes")


def test_cer():
    assert cer("kitten", "sitting") == pytest.approx(3 / 6)
    assert cer("a  b\nc", "a b c") == 0.0
    assert cer("abc", "") == 1.0


# --- a full scanned A4 page: character error rate and speed -----------------------------------

def test_scanned_page_reads_back_with_low_cer(capsys):
    lines = prose_lines(52, seed=3)  # a full A4 page of 11 pt text, ~4,000 characters
    scan = _scan([lines])
    settings = OcrSettings()
    from transforms.ingest.parse.ocr import get_engine
    get_engine(settings)  # model load (~1 s) is once per process, not per page
    t0, c0 = time.perf_counter(), time.process_time()
    docs, errors = parse_pdf_with_errors(_raw(scan), ocr=settings)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    assert errors == []
    (doc,) = docs
    text = doc.text
    rate = cer("\n".join(lines), text)
    with capsys.disabled():
        print(f"\nOCR A4 page: CER {rate:.4f}, {len(text)} chars, wall {wall:.1f} s "
              f"({1 / wall:.3f} pages/s), CPU {cpu:.1f} s, confidence "
              f"{doc.metadata['ocr_mean_confidence']}")
    assert rate <= MAX_CER
    assert [s.page for s in doc.sections] == [1]
    assert doc.metadata["ocr"] is True and set(doc.metadata["ocr_pages"]) == {"1"}
    assert doc.metadata["ocr_mean_confidence"] >= 0.9
    words = set(" ".join(lines).split())
    assert len(words & set(text.split())) / len(words) >= 0.95


# --- a mixed PDF: text pages, a scanned page, a blank scan and a speckled scan ----------------

@pytest.fixture(scope="module")
def mixed():
    text1 = ["Chapter One", *prose_lines(8, seed=1)]
    scanned = ["Chapter Two", *prose_lines(10, seed=2)]
    text5 = ["Chapter Three", *prose_lines(8, seed=4)]
    texts = text_pdf([text1, text5])
    images = image_pdf([render_pages(text_pdf([scanned]), dpi=200, noise=10.0)[0],
                        blank_image(150), blank_image(150, noise=True)], dpi=200)
    pdf = join_pdfs([(texts, 0), (images, 0), (images, 1), (images, 2), (texts, 1)],
                    outline=[("Chapter One", 0), ("Chapter Two", 1), ("Chapter Three", 4)])
    docs, errors = parse_pdf_with_errors(_raw(pdf, "mixed.pdf"))
    return {"pdf": pdf, "docs": docs, "errors": errors, "text1": text1, "scanned": scanned,
            "text5": text5}


def test_mixed_pdf_keeps_page_numbers_and_outline(mixed):
    (doc,) = mixed["docs"]
    pages = [s.page for s in doc.sections]
    assert pages == [1, 2, 5]  # pages 3 and 4 hold no text
    by_page = {s.page: s for s in doc.sections}
    assert by_page[1].heading_path == ["Chapter One"]
    assert by_page[2].heading_path == ["Chapter Two"]  # the outline title found in the OCR'd text
    assert by_page[5].heading_path == ["Chapter Three"]
    assert cer("\n".join(mixed["scanned"]), by_page[2].text) <= MAX_CER
    # the text pages come from their text layer, untouched by OCR
    assert by_page[1].text.split() == " ".join(mixed["text1"]).split()
    assert set(doc.metadata["ocr_pages"]) == {"2"}
    assert doc.metadata["ocr_failed_pages"] == [3, 4]


def test_blank_and_garbage_pages_are_per_page_errors(mixed):
    errors = mixed["errors"]
    assert len(errors) == 2
    assert errors[0].startswith("page 3: OCR found no text")
    assert errors[1].startswith("page 4: OCR")


def test_pipeline_entry_returns_page_errors(mixed):
    docs, errors = parse_object_with_errors(_raw(mixed["pdf"], "mixed.pdf"))
    assert [s.page for s in docs[0].sections] == [1, 2, 5]
    assert errors == mixed["errors"]


# --- modes, thresholds, missing packages ----------------------------------------------------------

@pytest.fixture(scope="module")
def short_scan():
    lines = prose_lines(6, seed=7)
    return lines, _scan([lines])


def test_mode_off_leaves_scans_unread(short_scan):
    _, scan = short_scan
    with pytest.raises(ParseError, match="no text extracted"):
        parse_pdf(_raw(scan), ocr=OcrSettings(mode="off"))


def test_low_confidence_page_is_an_error_and_document_fails_with_reason(short_scan):
    _, scan = short_scan
    with pytest.raises(ParseError, match=r"no text extracted \(page 1: OCR confidence"):
        parse_pdf(_raw(scan), ocr=OcrSettings(min_confidence=0.9999))


def test_force_mode_reads_text_pages_too():
    lines = prose_lines(5, seed=9)
    docs, errors = parse_pdf_with_errors(_raw(text_pdf([lines])), ocr=OcrSettings(mode="force"))
    assert errors == []
    assert docs[0].metadata["ocr_pages"].keys() == {"1"}
    assert cer("\n".join(lines), docs[0].text) <= MAX_CER


def test_missing_ocr_packages_give_page_errors_not_crashes(short_scan, monkeypatch):
    from transforms.ingest.parse import ocr
    monkeypatch.setattr(ocr, "ocr_available", lambda: "ImportError: no module named cv2")
    out = ocr_pdf(short_scan[1], [""])
    assert out.errors == {0: "OCR unavailable (install ragbeam[ocr]): ImportError: no module named cv2"}
    assert ocr_metadata(out) == {"ocr": False, "ocr_failed_pages": [1]}


def test_text_pdf_is_not_touched_in_auto_mode():
    lines = prose_lines(5, seed=11)
    docs, errors = parse_pdf_with_errors(_raw(text_pdf([lines])))
    assert errors == [] and "ocr" not in docs[0].metadata


# --- through the index job --------------------------------------------------------------------

def test_index_job_ocrs_scanned_pages_and_dead_letters_unreadable_ones(test_config, tmp_path):
    """A mixed PDF (text page, scanned page, blank scan) and a text file through `ragbeam index`:
    the scanned page's words are searchable, its chunks say they came from OCR, the blank page is
    one dead letter with its reason, and the run's counts reconcile."""
    import json

    from pipelines.index import run_index
    from transforms.index.publish import resolve_index

    text = ["Chapter One", *prose_lines(6, seed=11)]
    scanned = ["Chapter Two", *prose_lines(6, seed=12)]
    images = image_pdf([render_pages(text_pdf([scanned]), dpi=200, noise=10.0)[0], blank_image(150)], dpi=200)
    pdf = join_pdfs([(text_pdf([text]), 0), (images, 0), (images, 1)])
    src = tmp_path / "src"
    src.mkdir()
    (src / "mixed.pdf").write_bytes(pdf)
    (src / "note.txt").write_text("A plain note about nothing scanned at all.\n")
    s = run_index(test_config, str(src), str(tmp_path / "index"), progress=False, log=lambda *_: None)
    assert s["balanced"] and s["parsed"] == 2 and s["dead_lettered"] == 0
    assert s["dead_lettered_pages"] == 1
    version = resolve_index(str(tmp_path / "index"))
    dead = read_table(version, "dead_letters").to_pylist()
    assert [(d["stage"], d["reason"].split(":")[0]) for d in dead] == [("parse", "page 3")]
    chunks = [c for c in read_table(version, "chunks").to_pylist()
              if c["source_uri"].endswith("mixed.pdf")]
    by_page = {}
    for c in chunks:
        by_page.setdefault(c["page"], []).append(c)
    assert sorted(by_page) == [1, 2]
    meta2 = json.loads(by_page[2][0]["metadata"])
    assert meta2["ocr"] is True and meta2["ocr_confidence"] >= 0.75
    assert json.loads(by_page[1][0]["metadata"])["ocr"] is False
    ocr_text = " ".join(c["text"] for c in by_page[2])
    assert cer("\n".join(scanned), ocr_text) <= MAX_CER
