"""HTML -> Document: boilerplate dropped, headings as sections, tables as Markdown."""
from __future__ import annotations

import re
from typing import Optional

import lxml.html
from lxml import etree

from transforms.ingest.parse.base import (HeadingStack, ParseError, SectionBuilder, decode_text,
                                   file_stem, make_document, norm_lines, norm_ws)
from transforms.records import Document, RawObject


def _cls(name: str) -> str:
    return f"contains(concat(' ', normalize-space(@class), ' '), ' {name} ')"


# Page chrome, not content: generic landmarks plus the generators seen in the corpus
# (Sphinx, Node.js api docs, DocBook/debian-reference, AsciiDoc git docs).
_BOILERPLATE = etree.XPath(" | ".join([
    "//script", "//style", "//noscript", "//nav", "//header", "//footer",
    "//aside[not(contains(@class, 'footnote'))]",  # Sphinx puts footnotes in <aside>
    "//form", "//template", "//svg", "//iframe", "//button", "//select", "//object",
    "//*[@role='navigation' or @role='banner' or @role='contentinfo' or @role='search']",
    "//*[@aria-hidden='true']",
    *[f"//*[{_cls(c)}]" for c in (
        "related", "sphinxsidebar", "footer", "headerlink", "mobile-nav", "clearer",
        "navheader", "navfooter", "toc", "picker", "mark", "sidebar", "breadcrumb",
        "breadcrumbs", "skip-link", "copybutton", "list-of-tables", "list-of-figures",
        "list-of-examples")],
    "//*[@id='column2' or @id='toc' or @id='gtoc' or @id='footer' or @id='alt-docs']",
    "//details[@id='toc']",
    "//table[@summary='Navigation header' or @summary='Navigation footer']",
]))

_HEADINGS = {"h1": 1, "h2": 2, "h3": 3, "h4": 4, "h5": 5, "h6": 6}
# Elements whose content is a block of its own (flush the running paragraph around them).
_BLOCKS = {
    "p", "div", "section", "article", "main", "body", "blockquote", "dd", "dl", "figure",
    "figcaption", "center", "address", "caption", "fieldset", "details", "summary",
    "html", "hr", "li", "ul", "ol", "table", "pre", "dt",
}
# " — Python 3.11.2 documentation", " | Node.js v18 Documentation": trivial site suffixes.
_TITLE_SUFFIX = re.compile(r"\s+(?:[—–|-]|&#8212;)\s+[^—–|]*\b(?:documentation|docs|manual)\s*$",
                           re.IGNORECASE)
# Unfilled template slots (Node.js pages carry a literal __JS_FLAVORED_DYNAMIC_CSS__).
_PLACEHOLDER = re.compile(r"^__[A-Z][A-Z0-9_]*__$")
_XML_DECL = re.compile(r"^\s*<\?xml[^>]*\?>", re.IGNORECASE)


def _tag(el) -> str:
    t = el.tag
    return t.lower() if isinstance(t, str) else ""


def _inline_text(el) -> str:
    return norm_ws(el.text_content())


def _table_markdown(table) -> str:
    """A table as Markdown rows; layout tables (one column) come back as plain lines."""
    rows = []
    for tr in table.iter("tr"):
        # Skip rows that belong to a nested table.
        parent = tr.getparent()
        while parent is not None and _tag(parent) != "table":
            parent = parent.getparent()
        if parent is not table:
            continue
        cells = []
        for cell in tr:
            if _tag(cell) in ("td", "th"):
                text = norm_ws(cell.text_content()).replace("|", "\\|")
                cells.append(text)
                span = cell.get("colspan")
                if span and span.isdigit():
                    cells.extend([""] * (min(int(span), 20) - 1))
        if any(cells):
            rows.append(cells)
    if not rows:
        return ""
    width = max(len(r) for r in rows)
    if max(sum(1 for c in r if c) for r in rows) < 2:
        # Layout table (DocBook admonitions: icon cell + "Note" + text): plain lines.
        return "\n".join(c for r in rows for c in r if c)
    rows = [r + [""] * (width - len(r)) for r in rows]
    lines = ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * width]
    lines += ["| " + " | ".join(r) + " |" for r in rows[1:]]
    return "\n".join(lines)


class _Walker:
    def __init__(self) -> None:
        self.out = SectionBuilder()
        self.heads = HeadingStack()
        self.buf: list[str] = []
        self.first_h1: Optional[str] = None

    def flush(self) -> None:
        if self.buf:
            text = norm_lines("".join(self.buf))
            if not _PLACEHOLDER.match(text):
                self.out.add(text)
            self.buf = []

    def walk(self, el, list_depth: int = 0) -> None:
        tag = _tag(el)
        if not tag:  # comment / processing instruction
            return
        if tag in _HEADINGS:
            self.flush()
            text = _inline_text(el)
            if text:
                if tag == "h1" and self.first_h1 is None:
                    self.first_h1 = text
                self.out.start(self.heads.push(_HEADINGS[tag], text))
            return
        if tag == "pre":
            self.flush()
            self.out.add(el.text_content().rstrip())
            return
        if tag == "table":
            self.flush()
            self.out.add(_table_markdown(el))
            return
        if tag in ("ul", "ol"):
            self.flush()
            self.out.add("\n".join(self._list_lines(el, list_depth)))
            return
        if tag == "br":
            self.buf.append("\n")
            return
        block = tag in _BLOCKS
        if block:
            self.flush()
        # Source newlines are just spaces in HTML; only <br> breaks a line.
        if el.text:
            self.buf.append(el.text.replace("\n", " "))
        for child in el:
            self.walk(child, list_depth)
            if child.tail:
                self.buf.append(child.tail.replace("\n", " "))
        if block:
            self.flush()

    def _list_lines(self, lst, depth: int) -> list[str]:
        """Each li as "- text", nested lists indented below it."""
        lines = []
        ordered = _tag(lst) == "ol"
        n = 0
        for li in lst:
            if _tag(li) != "li":
                continue
            n += 1
            own: list[str] = []
            nested: list = []
            _split_item(li, own, nested)
            text = norm_ws("".join(own))
            if text:
                lines.append("  " * depth + (f"{n}." if ordered else "-") + " " + text)
            for sub in nested:
                lines.extend(self._list_lines(sub, depth + 1))
        return lines


def _split_item(el, own: list[str], nested: list) -> None:
    """Text of a list item without its sub-lists (collected into nested)."""
    if el.text:
        own.append(el.text)
    for child in el:
        tag = _tag(child)
        if tag in ("ul", "ol"):
            nested.append(child)
        elif tag in ("br", "p", "div", "pre", "dd", "dt"):
            own.append(" ")
            _split_item(child, own, nested)
            own.append(" ")
        elif tag:
            _split_item(child, own, nested)
        if child.tail:
            own.append(child.tail)


def _parse_tree(text: str):
    """The page as an lxml.html tree, read to its end however deeply it nests.

    libxml2's tree builder stops at 256 open elements (2048 with huge_tree) and drops the rest
    of the page silently; legacy pages with unclosed <p><font> get there after ~127 rows (a text
    run over 10 MB stops it too). Such pages are read again through the parser's event
    interface, which has no depth limit, into a tree flattened below FLAT_DEPTH levels."""
    parser = lxml.html.HTMLParser()
    root = lxml.html.document_fromstring(text, parser=parser)
    if not any(e.type_name == "ERR_RESOURCE_LIMIT" for e in parser.error_log):
        return root
    flat = etree.HTMLParser(target=_FlatBuilder(), huge_tree=True)  # text runs over 10 MB too
    root = etree.fromstring(text, flat)
    if root is None:
        raise etree.ParserError("Document is empty")
    return root


_LINE_TAGS = frozenset(_BLOCKS | {"br", "tr", "td", "th"} | set(_HEADINGS))
FLAT_DEPTH = 200  # well inside libxml2's 256 and Python's recursion limit (the walker recurses)


class _FlatBuilder:
    """Parser events -> an lxml.html tree no deeper than FLAT_DEPTH: a deeper element's text
    goes to its deepest kept ancestor, with a <br> where a block element began or ended so
    that rows stay lines."""

    def __init__(self) -> None:
        self.tb = etree.TreeBuilder(parser=lxml.html.HTMLParser())
        self.open: list = []  # the kept elements' tags, outermost first
        self.dropped = 0  # open elements below FLAT_DEPTH that got no node of their own
        self.broke = False  # a <br> was the last thing added: one is enough between two texts

    def start(self, tag, attrib):
        if len(self.open) >= FLAT_DEPTH:
            self.dropped += 1
            self._line_break(tag)
            return
        self.open.append(tag)
        self.tb.start(tag, dict(attrib))

    def end(self, tag):
        if self.dropped:
            self.dropped -= 1
            self._line_break(tag)
            return
        self.tb.end(self.open.pop())

    def _line_break(self, tag) -> None:
        if not self.broke and isinstance(tag, str) and tag.lower() in _LINE_TAGS:
            self.tb.start("br", {})
            self.tb.end("br")
            self.broke = True

    def data(self, text):
        if self.broke and not text.strip():
            return  # a page of 100,000 nested <div>s is mostly newlines between the tags
        self.broke = False
        self.tb.data(text)

    def comment(self, text):
        self.tb.comment(text)

    def pi(self, target, data=None):
        self.tb.pi(target, data)

    def close(self):
        while self.open:  # a parser that stopped early leaves elements open
            self.tb.end(self.open.pop())
        return self.tb.close()


def parse_html(raw: RawObject, source_uris: Optional[list[str]] = None) -> list[Document]:
    text = _XML_DECL.sub("", decode_text(raw.data), count=1)
    if not text.strip():
        raise ParseError("no text extracted")
    try:
        root = _parse_tree(text)
    except (etree.ParserError, ValueError) as e:
        raise ParseError(f"html: {type(e).__name__}: {e}") from e

    meta = {}
    lang = root.get("lang") or root.get("{http://www.w3.org/XML/1998/namespace}lang")
    if lang:
        meta["lang"] = lang
    desc = root.xpath("//meta[translate(@name,'DESCRIPTION','description')='description']/@content")
    if desc and desc[0].strip():
        meta["description"] = norm_ws(desc[0])[:500]
    gen = root.xpath("//meta[@name='generator']/@content")
    if gen:
        meta["generator"] = norm_ws(gen[0])[:100]
    titles = root.xpath("//title")
    title = norm_ws(titles[0].text_content()) if titles else ""

    for el in _BOILERPLATE(root):
        if el.getparent() is not None:
            el.drop_tree()  # keeps the tail text, which belongs to the parent
    body = root.find("body")
    walker = _Walker()
    walker.walk(body if body is not None else root)
    sections = walker.out.finish()

    stripped = _TITLE_SUFFIX.sub("", title).strip()
    title = stripped or title or walker.first_h1 or file_stem(raw.key)
    return [make_document(raw, "html", title, sections, source_uris, meta)]
