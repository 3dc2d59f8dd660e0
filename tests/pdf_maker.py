"""Small PDFs made in the tests: a text PDF written by hand (Helvetica, a real text layer),
its pages rendered to images and rebuilt as an image-only ("scanned") PDF, and mixtures.

Nothing here is downloaded or shipped: the text is below, the fonts are PDFium's built-in
standard fonts, the "scan" is PDFium's rendering saved through Pillow.
"""
from __future__ import annotations

import io
import random
import textwrap
from typing import Optional, Sequence

PROSE = """\
Debian packages are built from source packages, which contain the upstream tarball and a
debian directory with the packaging instructions. The control file names the binary packages,
their dependencies and a short description. The rules file is a makefile that builds the
software and installs it into a temporary tree before the package is assembled.
Maintainers upload new versions to the unstable distribution. After a few days without
release-critical bugs, a package migrates to testing, which becomes the next stable release.
Security updates for stable are prepared by the security team and announced on the mailing
list with the affected versions, for example 2.4.57-2 and 1.18.0-6+deb12u3.
The policy manual describes what every package must do: install files under /usr, keep
configuration in /etc, and never modify files that belong to another package. Scripts that
run during installation must be idempotent, because they may be run more than once.
A shared library package ships the library under its soname, so that two versions can be
installed side by side while programs move from the old interface to the new one.
To report a bug, use the reportbug tool; it collects the versions of related packages and
asks whether the problem is already known. A good report says what you did, what you
expected to happen and what happened instead, with the exact error message.
The documentation of most packages is installed under /usr/share/doc, together with the
copyright file and the changelog. Manual pages are in section 1 for commands, section 5 for
file formats and section 8 for administration tools.
Backports provide newer versions of selected packages for the stable release. They are
built against stable, tested by their maintainers and do not get the same security support.
Mirrors carry the archive in many countries; apt chooses the one named in sources.list and
verifies every file against the signed Release file before it installs anything.
"""


def prose_lines(n_lines: int, width: int = 84, seed: int = 0) -> list[str]:
    """`n_lines` lines of real-ish English, wrapped at `width` characters (deterministic)."""
    sentences = [s.strip() + "." for s in " ".join(PROSE.split()).split(". ") if s.strip()]
    rng = random.Random(seed)
    out: list[str] = []
    while len(out) < n_lines:
        rng.shuffle(sentences)
        para = " ".join(s.rstrip(".") + "." for s in sentences[:4])
        out.extend(textwrap.wrap(para, width))
    return out[:n_lines]


def _esc(s: str) -> str:
    return s.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")


def text_pdf(pages: Sequence[Sequence[str]], font_size: float = 11.0, leading: float = 14.0,
             title: Optional[str] = None) -> bytes:
    """A PDF with one real text layer per page (Helvetica), A4, lines from the top-left."""
    objs: list[bytes] = []

    def add(body: bytes) -> int:
        objs.append(body)
        return len(objs)

    catalog = add(b"")  # 1, filled in below
    pages_id = add(b"")  # 2
    font = add(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>")
    kids = []
    for lines in pages:
        ops = [f"BT /F1 {font_size} Tf {leading} TL 56 {842 - 64} Td"]
        for line in lines:
            ops.append(f"({_esc(line)}) Tj T*")
        ops.append("ET")
        stream = "\n".join(ops).encode("latin-1")
        content = add(b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream")
        kids.append(add(
            b"<< /Type /Page /Parent %d 0 R /MediaBox [0 0 595 842] /Contents %d 0 R "
            b"/Resources << /Font << /F1 %d 0 R >> >> >>" % (pages_id, content, font)))
    objs[catalog - 1] = b"<< /Type /Catalog /Pages %d 0 R >>" % pages_id
    objs[pages_id - 1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (
        b" ".join(b"%d 0 R" % k for k in kids), len(kids))
    info = None
    if title:
        info = add(b"<< /Title (%s) >>" % _esc(title).encode("latin-1"))
    return serialize(objs, catalog, info)


def serialize(objs: Sequence[bytes], root: int, info: Optional[int] = None) -> bytes:
    """PDF objects 1..n (their bodies) as a file: header, objects, xref table, trailer."""
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for i, body in enumerate(objs, 1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n" % i + body + b"\nendobj\n")
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objs) + 1))
    for off in offsets:
        out.write(b"%010d 00000 n \n" % off)
    trailer = b"<< /Size %d /Root %d 0 R" % (len(objs) + 1, root)
    if info:
        trailer += b" /Info %d 0 R" % info
    out.write(b"trailer\n" + trailer + b" >>\nstartxref\n%d\n%%%%EOF\n" % xref)
    return out.getvalue()


def render_pages(pdf: bytes, dpi: int = 150, noise: float = 0.0, seed: int = 0) -> list:
    """Each page of `pdf` as a grayscale PIL image, optionally with scanner-like noise."""
    import numpy as np
    import pypdfium2 as pdfium
    from PIL import Image

    doc = pdfium.PdfDocument(pdf)
    rng = np.random.default_rng(seed)
    images = []
    try:
        for i in range(len(doc)):
            img = doc[i].render(scale=dpi / 72, grayscale=True).to_pil().convert("L")
            if noise:
                arr = np.asarray(img, dtype=np.float32)
                arr = arr + rng.normal(0, noise, arr.shape)
                img = Image.fromarray(np.clip(arr, 0, 255).astype("uint8"), "L")
            images.append(img)
    finally:
        doc.close()
    return images


def image_pdf(images: Sequence, dpi: int = 150) -> bytes:
    """An image-only PDF (no text layer), one page per image, via Pillow's PDF writer."""
    buf = io.BytesIO()
    first, rest = images[0], list(images[1:])
    first.save(buf, "PDF", resolution=float(dpi), save_all=True, append_images=rest)
    return buf.getvalue()


def blank_image(dpi: int = 150, noise: bool = False, seed: int = 1):
    """An A4 page image: white, or (noise=True) random speckle that holds no text."""
    import numpy as np
    from PIL import Image
    w, h = int(595 / 72 * dpi), int(842 / 72 * dpi)
    if not noise:
        return Image.new("L", (w, h), 255)
    rng = np.random.default_rng(seed)
    arr = np.full((h, w), 255, np.uint8)
    dots = rng.random((h, w)) < 0.02
    arr[dots] = rng.integers(0, 160, int(dots.sum()), dtype=np.uint8)
    return Image.fromarray(arr, "L")


def join_pdfs(parts: Sequence[tuple[bytes, int]], outline: Sequence[tuple[str, int]] = ()) -> bytes:
    """Pages picked from several PDFs, [(pdf bytes, page index)], plus outline (title, page)."""
    import pypdf
    writer = pypdf.PdfWriter()
    readers: dict[int, pypdf.PdfReader] = {}
    for data, index in parts:
        reader = readers.setdefault(id(data), pypdf.PdfReader(io.BytesIO(data)))
        writer.add_page(reader.pages[index])
    for title, page in outline:
        writer.add_outline_item(title=title, page_number=page)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()
