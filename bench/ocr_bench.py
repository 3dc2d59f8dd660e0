"""5. OCR of scanned PDF pages: pages/s against text-layer extraction of the same pages, and
OCR's share of the index job's time on a corpus where 10% of the documents are scans.

The corpus is made here, from the bench dataset's texts: one short page per document (a
title and `lines` lines of ~84 characters), 90% as .txt, .md, .html or text PDF in turn and
every 10th as a scanned PDF (its text PDF rendered by PDFium at 200 dpi with scanner-like
noise and rebuilt as an image-only PDF, as tests/pdf_maker.py does for the OCR tests). Each
scan's text-PDF twin is kept for the baselines.

Measured:
- OCR pages/s: parse_pdf_with_errors on the scans (render at parse.ocr_dpi + rapidocr, one
  onnxruntime thread, as in the index job), engine already loaded; baseline: the same pages'
  text PDFs with parse.ocr off (text-layer extraction).
- three index jobs on fresh index folders: the corpus with parse.ocr auto; the same corpus
  with parse.ocr off (baseline: the scans are dead-lettered as "no text extracted"); and the
  corpus with each scan replaced by its text-PDF twin (same words, no OCR needed).
- OCR's share of the auto job: the seconds spent in ocr_pdf inside that job (timed by a
  wrapper; Beam's in-process runner calls it in this process) over the job's wall time, and
  the wall time the scans add over their text-PDF twins.
"""
from __future__ import annotations

import html
import os
import textwrap
import time

from bench.common import quiet, timed
from bench.data import Dataset
from bench.table import Figure, Report

SECTION = "5. OCR of scanned pages"
SCAN_EVERY = 10  # every 10th document is a scan: 10% of the corpus
SCAN_DPI = 200  # the "scanner"; OCR reads the page at parse.ocr_dpi (300 by default)
SCAN_NOISE = 10.0
FORMATS = ("txt", "md", "html", "pdf")  # the other 90%, in turn


def _pdf_maker():
    try:
        from tests import pdf_maker
    except ImportError as e:  # run from the repository root: tests/ is a namespace package there
        raise RuntimeError(f"the OCR bench needs tests/pdf_maker.py on the path (run from the repo root): {e}")
    return pdf_maker


def _latin1(s: str) -> str:
    """text_pdf writes WinAnsi (latin-1) strings; every format gets the same characters."""
    return s.encode("latin-1", "replace").decode("latin-1")


def page_lines(doc: dict, lines: int, width: int = 84) -> tuple[str, list[str]]:
    title = _latin1(" ".join((doc.get("title") or doc["_id"]).split()))[:70] or doc["_id"]
    body = textwrap.wrap(_latin1(" ".join(doc["text"].split())), width)[:lines]
    return title, body


def make_corpus(docs: list[dict], lines: int, folder: str) -> dict:
    """Write the corpus; return the paths and, for each scan, its text-PDF twin and its lines."""
    pm = _pdf_maker()
    os.makedirs(folder, exist_ok=True)
    scans, other = [], 0
    for i, doc in enumerate(docs):
        title, body = page_lines(doc, lines)
        stem = os.path.join(folder, f"doc{i:04d}")
        if i % SCAN_EVERY == 0:
            text = pm.text_pdf([[title, *body]], title=title)
            scan = pm.image_pdf(pm.render_pages(text, dpi=SCAN_DPI, noise=SCAN_NOISE, seed=i), dpi=SCAN_DPI)
            with open(stem + ".pdf", "wb") as f:
                f.write(scan)
            scans.append({"path": stem + ".pdf", "scan": scan, "text_pdf": text, "lines": [title, *body]})
            continue
        fmt = FORMATS[other % len(FORMATS)]
        other += 1
        if fmt == "pdf":
            with open(stem + ".pdf", "wb") as f:
                f.write(pm.text_pdf([[title, *body]], title=title))
        else:
            para = " ".join(body)
            content = {"txt": f"{title}\n\n{para}\n",
                       "md": f"# {title}\n\n{para}\n",
                       "html": f"<!doctype html><html><head><title>{html.escape(title)}</title></head><body>"
                               f"<h1>{html.escape(title)}</h1><p>{html.escape(para)}</p></body></html>\n"}[fmt]
            with open(f"{stem}.{fmt}", "w", encoding="utf-8") as f:
                f.write(content)
    return {"folder": folder, "docs": len(docs), "scans": scans}


def twin_corpus(corpus: dict, folder: str) -> str:
    """The same corpus with every scan replaced by its text PDF (same words, a text layer)."""
    import shutil
    shutil.copytree(corpus["folder"], folder)
    for s in corpus["scans"]:
        with open(os.path.join(folder, os.path.basename(s["path"])), "wb") as f:
            f.write(s["text_pdf"])
    return folder


class _OcrClock:
    """Wraps transforms.ingest.parse.pdf.ocr_pdf: seconds and pages OCR'd while installed."""

    def __init__(self):
        self.seconds = 0.0
        self.pages = 0
        self.calls = 0

    def __enter__(self):
        from transforms.ingest.parse import pdf as pdf_mod
        self._mod, self._orig = pdf_mod, pdf_mod.ocr_pdf

        def timed_ocr_pdf(*a, **kw):
            t0 = time.perf_counter()
            try:
                out = self._orig(*a, **kw)
            finally:
                self.seconds += time.perf_counter() - t0
                self.calls += 1
            self.pages += len(out.pages) + len(out.errors)
            return out

        pdf_mod.ocr_pdf = timed_ocr_pdf
        return self

    def __exit__(self, *exc):
        self._mod.ocr_pdf = self._orig
        return False


def _run_index(cfg, folder: str, index_dir: str, ocr_mode: str) -> dict:
    from pipelines.index import run_index
    c = cfg.model_copy(update={"parse": cfg.parse.model_copy(update={"ocr": ocr_mode})})
    s = run_index(c, folder, index_dir, progress=False, log=quiet)
    if s.get("cache_hits"):
        raise RuntimeError(f"OCR bench hit the embedding cache ({s['cache_hits']} chunks): not a fresh index")
    return s


def bench_ocr(cfg, data: Dataset, n_docs: int, lines: int, work: str, report: Report) -> dict:
    from pipelines.index import ocr_settings
    from transforms.ingest.parse.ocr import OcrSettings, cer, get_engine, ocr_available
    from transforms.ingest.parse.pdf import parse_pdf_with_errors
    from transforms.records import RawObject

    missing = ocr_available()
    if missing:
        print(f"\n## {SECTION}\n  skipped: OCR packages not installed ({missing}); pip install -e '.[ocr]'")
        return {}
    corpus = make_corpus(data.take(n_docs), lines, os.path.join(work, "corpus-ocr"))
    scans = corpus["scans"]
    n_pages = len(scans)
    settings = ocr_settings(cfg)  # the index job's settings (mode, dpi, min confidence)
    if settings.mode == "off":
        settings = OcrSettings(mode="auto", dpi=settings.dpi, min_confidence=settings.min_confidence)

    # 1. OCR pages/s vs text-layer extraction of the same pages.
    get_engine(settings)  # model load (~1 s) is once per process; not counted per page
    errors, text = [], []
    c0 = time.process_time()
    with timed() as t_ocr:
        for s in scans:
            docs, errs = parse_pdf_with_errors(RawObject.from_bytes(f"file://{s['path']}", s["path"], s["scan"]),
                                               ocr=settings)
            errors += errs
            text.append((s["lines"], " ".join(d.text for d in docs)))
    cpu_ocr = time.process_time() - c0
    off = OcrSettings(mode="off")
    raws = [RawObject.from_bytes(f"file://{s['path']}", s["path"], s["text_pdf"]) for s in scans]
    rounds, t_text = 0, 0.0
    while rounds < 3 or t_text < 1.0:  # repeat: one pass over a few pages takes milliseconds
        with timed() as t:
            for r in raws:
                parse_pdf_with_errors(r, ocr=off)
        t_text += t.s
        rounds += 1
    text_rate = rounds * n_pages / t_text
    ocr_rate = n_pages / t_ocr.s
    cer_mean = sum(cer("\n".join(ref), hyp) for ref, hyp in text) / max(1, len(text))
    chars = sum(len("\n".join(ref)) for ref, _ in text) / max(1, len(text))
    report.add(Figure(SECTION, f"OCR pages/s, {n_pages} scanned pages (~{chars:.0f} chars each)", ocr_rate,
                      "pages/s", text_rate, "text-layer extraction of the same pages as text PDFs (parse.ocr off)",
                      note=f"render at {settings.dpi} dpi + rapidocr, {settings.threads} onnxruntime thread, "
                           f"model already loaded; {cpu_ocr / max(1, n_pages):.1f} s CPU per page; "
                           f"{len(errors)} pages unread"))
    report.add(Figure(SECTION, "OCR character error rate, same pages", cer_mean, "",
                      note=f"scanned at {SCAN_DPI} dpi with noise, read at {settings.dpi} dpi"))

    # 2. The index job: auto vs off on the same corpus, and auto on the text-PDF twin corpus.
    s_off = _run_index(cfg, corpus["folder"], os.path.join(work, "index-ocr-off"), "off")
    with _OcrClock() as clock:
        s_auto = _run_index(cfg, corpus["folder"], os.path.join(work, "index-ocr-auto"), settings.mode)
    twin = twin_corpus(corpus, os.path.join(work, "corpus-ocr-twin"))
    s_twin = _run_index(cfg, twin, os.path.join(work, "index-ocr-twin"), settings.mode)

    report.add(Figure(SECTION, f"index job wall, {n_docs} docs, {n_pages} scanned (parse.ocr {settings.mode})",
                      s_auto["wall_s"], "s", s_off["wall_s"], "the same corpus with parse.ocr off",
                      note=f"auto: {s_auto['chunks']} chunks, {s_auto['dead_lettered']} docs and "
                           f"{s_auto['dead_lettered_pages']} pages dead-lettered; off: {s_off['chunks']} chunks, "
                           f"{s_off['dead_lettered']} scans dead-lettered as 'no text extracted'"))
    if clock.pages:
        report.add(Figure(SECTION, f"OCR time inside that index job ({clock.pages} pages)", clock.seconds, "s",
                          s_auto["wall_s"], "the job's wall time (ratio = OCR's share)",
                          note=f"ocr_pdf timed in-process; {clock.pages / clock.seconds:.3f} pages/s there"
                          if clock.seconds else "ocr_pdf timed in-process"))
    else:
        print(f"  (OCR time inside the job not measured: runner {cfg.runner.name}/"
              f"{cfg.runner.direct_running_mode} does not run the parse step in this process)")
    extra = s_auto["wall_s"] - s_twin["wall_s"]
    report.add(Figure(SECTION, "wall the scans add over their text-PDF twins", extra, "s", s_auto["wall_s"],
                      "the job's wall time (ratio = OCR's share, by difference)",
                      note=f"text-twin corpus: {s_twin['wall_s']:.1f} s, {s_twin['chunks']} chunks; "
                           "one run each, so seconds of noise on a loaded machine"))
    return {"corpus": corpus["folder"], "pages": n_pages, "ocr_s": t_ocr.s, "ocr_cpu_s": cpu_ocr,
            "off": s_off, "auto": s_auto, "twin": s_twin, "job_ocr_s": clock.seconds,
            "job_ocr_pages": clock.pages}
