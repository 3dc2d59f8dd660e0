"""OCR of scanned PDF pages: decide which pages need it, render them, read them.

Plain functions, no Beam: `page_needs_ocr` (mode `auto`: an (almost) empty text layer over
images that cover a real part of the page; `force`; `off`), `render_page` (pypdfium2 at `dpi`,
the long side capped at `max_side_px`), `ocr_image` (rapidocr on onnxruntime, models inside the
wheel, one engine per process and thread count), `reading_order` (top to bottom, one column:
a two-column scan comes out line by line across both) and `ocr_pdf` (all of them for one PDF; a
page that cannot be read comes back as an error string for that page, never as an exception).
Without the optional `ocr` extra a page that needs OCR gets "OCR unavailable: ..." and the rest
of the document is indexed. The settings come from the config's `parse:` section (OcrSettings).
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

OCR_MODES = ("auto", "off", "force")
POINTS_PER_INCH = 72.0


@dataclass(frozen=True)
class OcrSettings:
    """What `parse.ocr` would hold (frozen and picklable: a DoFn can carry it)."""
    mode: str = "auto"  # auto | off | force
    dpi: int = 300  # measured on 11 pt text: CER 0.2% at 300 dpi, 4% at 200 (the model drops spaces)
    max_side_px: int = 3600  # cap on the rendered page's long side (A4 at 300 dpi: 3508)
    det_side_px: int = 1280  # text *detection* runs on the page scaled to this long side; recognition
    #                          reads the boxes from the full render (same CER, detection ~3x cheaper)
    min_text_chars: int = 32  # auto: fewer non-space characters in the text layer = "no text layer"
    min_image_cover: float = 0.25  # auto: images must cover this share of the page (a logo is not a scan)
    min_confidence: float = 0.75  # page mean (character-weighted) below this -> per-page error
    min_line_confidence: float = 0.5  # lines below this are dropped from the text (still counted in the mean)
    use_angle_cls: bool = False  # 180-degree line classifier: +~10% time, only for upside-down scans
    threads: int = 1  # onnxruntime intra-op threads per engine; Beam already runs one DoFn per core

    def __post_init__(self) -> None:
        if self.mode not in OCR_MODES:
            raise ValueError(f"ocr mode must be one of {OCR_MODES}, got {self.mode!r}")
        if not (36 <= self.dpi <= 600):
            raise ValueError(f"ocr dpi must be within 36..600, got {self.dpi}")
        if self.threads < 1:
            raise ValueError("ocr threads must be >= 1")


class OcrPageError(Exception):
    """One page that OCR could not read; the message is the reason (dead-lettered per page)."""


@dataclass(frozen=True)
class OcrLine:
    text: str
    confidence: float
    box: tuple[float, float, float, float]  # x0, y0, x1, y1 in pixels, y downwards


@dataclass(frozen=True)
class OcrPage:
    text: str
    confidence: float  # mean over recognized characters, 0..1
    lines: int
    seconds: float


@dataclass
class OcrOutcome:
    """What `ocr_pdf` found for the pages it was asked about (0-based page indexes)."""
    pages: dict[int, OcrPage] = field(default_factory=dict)
    errors: dict[int, str] = field(default_factory=dict)
    seconds: float = 0.0


# --- deciding ----------------------------------------------------------------------

def text_chars(text: Optional[str]) -> int:
    return sum(1 for c in (text or "") if not c.isspace())


def page_needs_ocr(text_layer: Optional[str], image_cover: float, settings: OcrSettings) -> bool:
    """Whether to OCR a page, given its extracted text layer and the share of it images cover."""
    if settings.mode == "off":
        return False
    if settings.mode == "force":
        return True
    return text_chars(text_layer) < settings.min_text_chars and image_cover >= settings.min_image_cover


# --- PDFium: one lock, because PDFium is not thread-safe -------------------------------

_PDFIUM_LOCK = threading.RLock()


def _open_pdf(data: bytes):
    import pypdfium2 as pdfium
    return pdfium.PdfDocument(data)


def image_cover(page: Any) -> float:
    """Share of the page's area under image objects (0..1, overlaps counted twice, capped)."""
    import pypdfium2.raw as pdfium_c
    w, h = page.get_size()
    area = max(w * h, 1e-6)
    covered = 0.0
    for obj in page.get_objects(filter=[pdfium_c.FPDF_PAGEOBJ_IMAGE]):
        try:
            l, b, r, t = obj.get_bounds()
        except Exception:
            continue
        covered += max(0.0, min(r, w) - max(l, 0.0)) * max(0.0, min(t, h) - max(b, 0.0))
    return min(1.0, covered / area)


def render_page(page: Any, dpi: int, max_side_px: int):
    """A pypdfium2 page -> RGB numpy array (H, W, 3) at `dpi`, long side <= max_side_px."""
    w, h = page.get_size()  # points
    scale = dpi / POINTS_PER_INCH
    longest = max(w, h) * scale
    if longest > max_side_px:
        scale *= max_side_px / longest
    bitmap = page.render(scale=scale, rev_byteorder=True, fill_color=(255, 255, 255, 255))
    arr = bitmap.to_numpy()
    if arr.ndim == 3 and arr.shape[2] == 4:
        arr = arr[:, :, :3]
    return arr.copy()  # own the memory: the bitmap's buffer goes away with the bitmap


# --- the engine: one per process (and thread count), created lazily ------------------

_ENGINES: dict[tuple, Any] = {}
_ENGINE_LOCK = threading.Lock()


def get_engine(settings: OcrSettings):
    """The process's rapidocr engine for these settings; the first call loads the models (~1 s)."""
    key = (settings.threads, settings.use_angle_cls, settings.det_side_px, settings.max_side_px)
    engine = _ENGINES.get(key)
    if engine is None:
        with _ENGINE_LOCK:
            engine = _ENGINES.get(key)
            if engine is None:
                from rapidocr_onnxruntime import RapidOCR
                engine = RapidOCR(
                    text_score=0.0,  # keep every line: we weigh confidence ourselves
                    use_cls=settings.use_angle_cls,
                    max_side_len=max(settings.max_side_px, 2000),  # we already sized the render
                    det_limit_type="max",
                    det_limit_side_len=settings.det_side_px,
                    intra_op_num_threads=settings.threads,
                    inter_op_num_threads=1,
                )
                _ENGINES[key] = engine
    return engine


def ocr_available() -> Optional[str]:
    """None when the OCR packages import, else the reason they do not."""
    try:
        import pypdfium2  # noqa: F401
        import rapidocr_onnxruntime  # noqa: F401
    except Exception as e:  # ImportError, or cv2 missing a system library
        return f"{type(e).__name__}: {e}"
    return None


# --- reading order -------------------------------------------------------------------

def _box(points: Sequence[Sequence[float]]) -> tuple[float, float, float, float]:
    xs = [float(p[0]) for p in points]
    ys = [float(p[1]) for p in points]
    return min(xs), min(ys), max(xs), max(ys)


def reading_order(lines: Sequence[OcrLine]) -> str:
    """Boxes -> text: rows top to bottom (boxes whose vertical centres are within half a line
    height share a row), each row left to right; a blank line marks a paragraph gap."""
    items = [ln for ln in lines if ln.text.strip()]
    if not items:
        return ""
    heights = sorted(max(1.0, ln.box[3] - ln.box[1]) for ln in items)
    median_h = heights[len(heights) // 2]
    items.sort(key=lambda ln: ((ln.box[1] + ln.box[3]) / 2, ln.box[0]))
    rows: list[list[OcrLine]] = []
    centre = 0.0
    for ln in items:
        c = (ln.box[1] + ln.box[3]) / 2
        h = max(1.0, ln.box[3] - ln.box[1])
        if rows and abs(c - centre) <= 0.5 * min(h, median_h):
            rows[-1].append(ln)
            centre = sum((x.box[1] + x.box[3]) / 2 for x in rows[-1]) / len(rows[-1])
        else:
            rows.append([ln])
            centre = c
    out: list[str] = []
    prev_bottom: Optional[float] = None
    for row in rows:
        row.sort(key=lambda ln: ln.box[0])
        top = min(ln.box[1] for ln in row)
        if prev_bottom is not None and top - prev_bottom > 0.9 * median_h:
            out.append("")  # paragraph break
        out.append(" ".join(ln.text.strip() for ln in row))
        prev_bottom = max(ln.box[3] for ln in row)
    return "\n".join(out)


def mean_confidence(lines: Sequence[OcrLine]) -> float:
    """Character-weighted mean confidence (a one-letter smudge weighs less than a sentence)."""
    total = sum(len(ln.text.strip()) for ln in lines)
    if total == 0:
        return 0.0
    return sum(ln.confidence * len(ln.text.strip()) for ln in lines) / total


# --- reading one image / one PDF -----------------------------------------------------------

def ocr_image(image, settings: OcrSettings = OcrSettings()) -> OcrPage:
    """An RGB/grayscale numpy image -> OcrPage; OcrPageError when it yields no usable text."""
    import numpy as np
    t0 = time.perf_counter()
    arr = np.asarray(image)
    if arr.ndim == 2:
        arr = np.stack([arr] * 3, axis=-1)
    if arr.size == 0 or min(arr.shape[:2]) < 8:
        raise OcrPageError("OCR: page image is empty")
    if float(arr.std()) < 1.0:  # one flat colour: nothing to read, skip the models
        raise OcrPageError("OCR found no text (blank page)")
    engine = get_engine(settings)
    try:
        # rapidocr works in BGR (OpenCV) order; pypdfium2 gave us RGB.
        result, _ = engine(np.ascontiguousarray(arr[:, :, ::-1]))
    except Exception as e:
        raise OcrPageError(f"OCR failed: {type(e).__name__}: {str(e)[:200]}") from e
    lines = [OcrLine(str(text), float(score), _box(points))
             for points, text, score in (result or []) if str(text).strip()]
    if not lines:
        raise OcrPageError("OCR found no text")
    conf = mean_confidence(lines)
    kept = [ln for ln in lines if ln.confidence >= settings.min_line_confidence]
    text = reading_order(kept)
    if conf < settings.min_confidence:
        raise OcrPageError(f"OCR confidence {conf:.2f} below {settings.min_confidence:.2f} "
                           f"({len(lines)} lines)")
    if not text.strip():
        raise OcrPageError("OCR found no text above the line confidence threshold")
    return OcrPage(text=text, confidence=conf, lines=len(kept), seconds=time.perf_counter() - t0)


def ocr_pdf(data: bytes, text_layers: Sequence[Optional[str]],
            settings: OcrSettings = OcrSettings(),
            pages: Optional[Sequence[int]] = None) -> OcrOutcome:
    """OCR the pages of one PDF that need it.

    `text_layers[i]` is page i's extracted text (None when extraction failed). Pages are
    chosen by `page_needs_ocr` unless `pages` (0-based) names them. Every chosen page ends
    up in `outcome.pages` or `outcome.errors` (reason); nothing is raised for a bad page.
    """
    outcome = OcrOutcome()
    if settings.mode == "off" and pages is None:
        return outcome
    t0 = time.perf_counter()
    missing = ocr_available()
    if missing is not None:
        # Without PDFium we cannot tell a scan from a blank page: every page that might
        # need OCR gets the reason, so an install without the `ocr` extra is visible.
        for i in (pages if pages is not None else range(len(text_layers))):
            if pages is not None or page_needs_ocr(text_layers[i], 1.0, settings):
                outcome.errors[i] = f"OCR unavailable (install ragbeam[ocr]): {missing}"
        return outcome
    if pages is None and not any(page_needs_ocr(t, 1.0, settings) for t in text_layers):
        return outcome  # every page has a text layer: PDFium is not even opened
    with _PDFIUM_LOCK:
        try:
            pdf = _open_pdf(data)
            n = len(pdf)
        except Exception as e:
            for i in (pages if pages is not None else range(len(text_layers))):
                if pages is not None or page_needs_ocr(text_layers[i], 1.0, settings):
                    outcome.errors[i] = f"OCR: PDFium cannot open the file: {type(e).__name__}: {e}"
            return outcome
    try:
        # One page at a time: a 500-page scan at 300 dpi would be ~13 GB of bitmaps at once.
        for i in (pages if pages is not None else range(min(n, len(text_layers)))):
            if not (0 <= i < n):
                outcome.errors[i] = f"OCR: no page {i + 1} in a {n}-page PDF"
                continue
            layer = text_layers[i] if i < len(text_layers) else None
            if pages is None and not page_needs_ocr(layer, 1.0, settings):
                continue  # enough text whatever the images: skip loading the page
            with _PDFIUM_LOCK:
                try:
                    page = pdf[i]
                    cover = image_cover(page)
                    if pages is None and not page_needs_ocr(layer, cover, settings):
                        continue
                    if pages is None and settings.mode == "force" and text_chars(layer) == 0 \
                            and cover == 0.0:
                        continue  # force mode, blank page: nothing to read, not an error
                    img = render_page(page, settings.dpi, settings.max_side_px)
                except Exception as e:
                    outcome.errors[i] = f"OCR: cannot render page: {type(e).__name__}: {str(e)[:200]}"
                    continue
            # The models run outside the PDFium lock: other threads can render meanwhile.
            try:
                outcome.pages[i] = ocr_image(img, settings)
            except OcrPageError as e:
                outcome.errors[i] = str(e)
            except Exception as e:  # an engine bug must not sink the document
                outcome.errors[i] = f"OCR failed: {type(e).__name__}: {str(e)[:200]}"
            del img
    finally:
        with _PDFIUM_LOCK:
            pdf.close()
    outcome.seconds = time.perf_counter() - t0
    return outcome


def ocr_metadata(outcome: OcrOutcome) -> dict[str, Any]:
    """Document metadata for the OCR'd pages ({} when none): which pages, at what confidence.

    `ocr_pages` maps the 1-based page number (a string: JSON keys) to that page's mean
    confidence, so a chunk (which carries `page` and the document's metadata) can tell whether
    it came from OCR. Rounded, so a rerun writes the same metadata.
    """
    if not outcome.pages and not outcome.errors:
        return {}
    meta: dict[str, Any] = {"ocr": bool(outcome.pages)}
    if outcome.pages:
        chars = {i: max(1, len(p.text)) for i, p in outcome.pages.items()}
        meta["ocr_pages"] = {str(i + 1): round(p.confidence, 3) for i, p in sorted(outcome.pages.items())}
        meta["ocr_mean_confidence"] = round(
            sum(p.confidence * chars[i] for i, p in outcome.pages.items()) / sum(chars.values()), 3)
    if outcome.errors:
        meta["ocr_failed_pages"] = sorted(i + 1 for i in outcome.errors)
    return meta


def cer(reference: str, hypothesis: str) -> float:
    """Character error rate: Levenshtein(ref, hyp) / len(ref), on whitespace-normalized text."""
    import numpy as np
    ref = " ".join(reference.split())
    hyp = " ".join(hypothesis.split())
    if not ref:
        return 0.0 if not hyp else 1.0
    h = np.frombuffer(hyp.encode("utf-32-le"), dtype=np.uint32)
    idx = np.arange(len(h) + 1)
    prev = idx.copy()
    for i, ch in enumerate(ref, 1):
        sub = prev[:-1] + (h != ord(ch))  # substitution / match
        tmp = np.empty_like(prev)
        tmp[0] = i
        tmp[1:] = np.minimum(prev[1:] + 1, sub)  # deletion
        prev = np.minimum.accumulate(tmp - idx) + idx  # insertion, as a running minimum
    return float(prev[-1]) / len(ref)


__all__ = ["OCR_MODES", "OcrSettings", "OcrPageError", "OcrLine", "OcrPage", "OcrOutcome",
           "page_needs_ocr", "image_cover", "render_page", "get_engine", "ocr_available",
           "reading_order", "mean_confidence", "ocr_image", "ocr_pdf", "ocr_metadata", "cer",
           "text_chars"]
