"""Plain text / AsciiDoc-ish -> Document: setext and '= Title' headings become sections."""
from __future__ import annotations

import re
from typing import Optional

from transforms.ingest.parse.base import (HeadingStack, SectionBuilder, decode_text, file_stem,
                                   make_document, norm_ws)
from transforms.records import Document, RawObject

# AsciiDoc's underline characters, in level order (= is the document title).
_UNDERLINE_LEVEL = {"=": 1, "-": 2, "~": 3, "^": 4, "+": 5}
_UNDERLINE = re.compile(r"^([=\-~^+])\1+\s*$")
_ONE_LINE = re.compile(r"^(={1,6})\s+(\S.*?)(?:\s+\1)?\s*$")
# AsciiDoc delimited blocks (listing, literal, example, passthrough...): kept verbatim.
_DELIM = re.compile(r"^(-{4,}|\.{4,}|={4,}|\+{4,}|_{4,}|\*{4,}|/{4,})\s*$")
# DocBook/lynx-style text dumps: "Chapter 3. The Root Filesystem", "3.4.1. Purpose".
_NUMBERED = re.compile(r"^(?:(?:Chapter|Appendix|Part)\s+[0-9A-Z]+\.?|(\d+(?:\.\d+)*)\.|[A-Z]\.(?:\d+\.)*)"
                       r"\s+\S.{0,118}$")
_COLUMNS = re.compile(r"\S {3,}\S")  # a table row in a text dump: keep its lines
_LISTISH = re.compile(r"^\s*(?:[-*•+]|\d+[.)]|[a-z][.)])\s+|::\s*$|;;\s*$")


def _is_heading(title: str, under: str) -> bool:
    t = title.strip()
    return (bool(_UNDERLINE.match(under)) and len(t) >= 2 and not title[:1].isspace()
            and any(c.isalnum() for c in t) and not _DELIM.match(title)
            and abs(len(under.rstrip()) - len(title.rstrip())) <= 2)


def _render(lines: list[str]) -> str:
    """One paragraph: prose joined into one line; indented or list-like text kept as lines."""
    indents = {len(ln) - len(ln.lstrip()) for ln in lines}
    if len(indents) == 1 and not any(_LISTISH.search(ln) or _COLUMNS.search(ln) for ln in lines):
        return norm_ws(" ".join(lines))
    cut = min(indents)
    return "\n".join(ln[cut:].rstrip() for ln in lines)


def parse_text(raw: RawObject, source_uris: Optional[list[str]] = None) -> list[Document]:
    lines = decode_text(raw.data).expandtabs(8).split("\n")
    out, heads = SectionBuilder(), HeadingStack()
    title = ""
    para: list[str] = []

    def flush() -> None:
        if para:
            out.add(_render(para))
            para.clear()

    def heading(level: int, text: str) -> None:
        nonlocal title
        flush()
        text = norm_ws(text)
        if not title:
            title = text
        out.start(heads.push(level, text))

    i, n = 0, len(lines)
    while i < n:
        line = lines[i]
        nxt = lines[i + 1] if i + 1 < n else ""
        if line.strip() and not para and _is_heading(line, nxt) and (
                i + 2 >= n or not _UNDERLINE.match(lines[i + 2]) or not lines[i + 2].strip()):
            heading(_UNDERLINE_LEVEL[nxt.strip()[0]], line)
            i += 2
            continue
        m = _ONE_LINE.match(line)
        if m and not para:
            heading(len(m.group(1)), m.group(2))
            i += 1
            continue
        nm = _NUMBERED.match(line)
        if nm and not para and not nxt.strip() and (i == 0 or not lines[i - 1].strip()) \
                and not line.rstrip().endswith((".", ":", ",", ";")):
            level = 1 if not nm.group(1) else nm.group(1).count(".") + 1
            if line.startswith(("Chapter", "Appendix", "Part")):
                level = 1
            elif nm.group(1) is None:  # "A.1." appendix sections
                level = line.split()[0].count(".")
            heading(level, line)
            i += 1
            continue
        d = _DELIM.match(line)
        if d and not para:
            # Delimited block: everything to the matching delimiter, verbatim.
            end = next((j for j in range(i + 1, n) if lines[j].rstrip() == line.rstrip()), None)
            if end is not None:
                out.add("\n".join(ln.rstrip() for ln in lines[i + 1:end]))
                i = end + 1
                continue
        if not line.strip():
            flush()
        else:
            para.append(line)
        i += 1
    flush()
    sections = out.finish()
    if not title:
        title = next((ln.strip() for ln in lines if ln.strip()), "")[:200]
    return [make_document(raw, "text", title or file_stem(raw.key), sections, source_uris)]
