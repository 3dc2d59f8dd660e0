"""Markdown -> Document via markdown-it-py tokens: heading sections, code and tables kept."""
from __future__ import annotations

import re
from typing import Optional

import yaml
from markdown_it import MarkdownIt

from transforms.ingest.parse.base import (HeadingStack, SectionBuilder, decode_text, file_stem,
                                   make_document, norm_lines, norm_ws)
from transforms.records import Document, RawObject

_MD = MarkdownIt("commonmark").enable("table").enable("strikethrough")
_FRONT = re.compile(r"\A---[ \t]*\n(.*?\n)(?:---|\.\.\.)[ \t]*(?:\n|\Z)", re.DOTALL)
_TAGS = re.compile(r"<[^>]*>")


def _inline(tok) -> str:
    """Plain text of an inline token: link text, code spans, image alt; markup dropped."""
    parts = []
    for c in tok.children or []:
        if c.type in ("text", "code_inline"):
            parts.append(c.content)
        elif c.type == "softbreak":
            parts.append(" ")
        elif c.type == "hardbreak":
            parts.append("\n")
        elif c.type == "image":
            parts.append(c.content or "")
        elif c.type == "html_inline" and c.content.startswith("<br"):
            parts.append("\n")
    return norm_lines("".join(parts))


def _front_matter(text: str) -> tuple[dict, str]:
    m = _FRONT.match(text)
    if not m:
        return {}, text
    try:
        data = yaml.safe_load(m.group(1))
    except yaml.YAMLError:
        return {}, text  # not front matter after all (e.g. a leading thematic break)
    if not isinstance(data, dict):
        return {}, text
    return data, text[m.end():]


# markdown-it's tokens take ~140x the text they come from (a file of tiny paragraphs), so a long
# file is parsed a piece at a time: cut at blank lines outside code fences, once a piece is this long
PIECE_CHARS = 1 << 20
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")


def pieces(body: str, size: Optional[int] = None):
    """The text in pieces of about `size` (PIECE_CHARS) characters, each ending at a blank line
    outside a code fence (a file shorter than that is one piece: parsed exactly as a whole)."""
    size = size or PIECE_CHARS
    if len(body) <= size:
        yield body
        return
    start, pos, fence = 0, 0, None
    for line in body.splitlines(keepends=True):
        pos += len(line)
        m = _FENCE.match(line)
        if m:
            mark = m.group(1)
            if fence is None:
                fence = mark
            elif mark[0] == fence[0] and len(mark) >= len(fence):
                fence = None
        elif fence is None and not line.strip() and pos - start >= size:
            yield body[start:pos]
            start = pos
    if start < len(body):
        yield body[start:]


def parse_markdown(raw: RawObject, source_uris: Optional[list[str]] = None) -> list[Document]:
    front, body = _front_matter(decode_text(raw.data))
    out, heads = SectionBuilder(), HeadingStack()
    first_h1 = None
    lists: list[list] = []  # stack of [ordered, counter, marker pending]
    item_lines: list[str] = []  # lines of the list being built (emitted as one block)
    table: Optional[list[list[str]]] = None
    for piece in pieces(body):  # one piece's tokens alive at a time
        first_h1, table = _walk(_MD.parse(piece), out, heads, lists, item_lines, table, first_h1)
    if item_lines:
        out.add("\n".join(item_lines))
    sections = out.finish()

    meta = {k: front[k] for k in ("description", "tags", "author", "date")
            if k in front and isinstance(front[k], (str, int, float, list))}
    title = str(front.get("title") or "").strip() or first_h1 or file_stem(raw.key)
    return [make_document(raw, "markdown", title, sections, source_uris, meta)]


def _walk(tokens, out: SectionBuilder, heads: HeadingStack, lists: list, item_lines: list[str],
          table: Optional[list], first_h1: Optional[str]) -> tuple[Optional[str], Optional[list]]:
    """One piece's tokens into the sections; the list, table and heading state carries over."""
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        t = tok.type
        if t == "heading_open":
            text = _inline(tokens[i + 1])
            level = int(tok.tag[1])
            if level == 1 and first_h1 is None:
                first_h1 = text
            if text:
                out.start(heads.push(level, text))
            i += 3
            continue
        if t in ("bullet_list_open", "ordered_list_open"):
            lists.append([t == "ordered_list_open", int(tok.attrGet("start") or 1) - 1, False])
        elif t in ("bullet_list_close", "ordered_list_close"):
            lists.pop()
            if not lists:
                out.add("\n".join(item_lines))
                item_lines.clear()
        elif t == "list_item_open":
            lists[-1][1] += 1
            lists[-1][2] = True  # the item's first paragraph carries the marker
        elif t == "table_open":
            table = []
        elif t == "tr_open" and table is not None:
            table.append([])
        elif t == "inline" and table is not None:
            table[-1].append(_inline(tok).replace("\n", " ").replace("|", "\\|"))
        elif t == "table_close" and table:
            width = max(len(r) for r in table)
            rows = [r + [""] * (width - len(r)) for r in table]
            lines = ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * width]
            lines += ["| " + " | ".join(r) + " |" for r in rows[1:]]
            out.add("\n".join(lines))
            table = None
        elif t == "inline":
            text = _inline(tok)
            if lists:
                depth = len(lists) - 1
                state = lists[-1]
                if state[2]:
                    state[2] = False
                    marker = f"{state[1]}." if state[0] else "-"
                    item_lines.append("  " * depth + f"{marker} {norm_ws(text)}")
                elif text:
                    item_lines.append("  " * (depth + 1) + norm_ws(text))
            else:
                out.add(text)
        elif t in ("fence", "code_block"):
            code = tok.content.rstrip("\n")
            if lists:
                item_lines.append(code)
            else:
                out.add(code)
        elif t == "html_block":
            text = norm_ws(_TAGS.sub(" ", re.sub(r"<!--.*?-->", " ", tok.content, flags=re.S)))
            if text:
                out.add(text)
        i += 1
    return first_h1, table
