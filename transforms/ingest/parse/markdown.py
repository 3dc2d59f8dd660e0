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


def parse_markdown(raw: RawObject, source_uris: Optional[list[str]] = None) -> list[Document]:
    front, body = _front_matter(decode_text(raw.data))
    tokens = _MD.parse(body)
    out, heads = SectionBuilder(), HeadingStack()
    first_h1 = None
    lists: list[list] = []  # stack of [ordered, counter, marker pending]
    item_lines: list[str] = []  # lines of the list being built (emitted as one block)
    table: Optional[list[list[str]]] = None
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
                item_lines = []
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
    if item_lines:
        out.add("\n".join(item_lines))
    sections = out.finish()

    meta = {k: front[k] for k in ("description", "tags", "author", "date")
            if k in front and isinstance(front[k], (str, int, float, list))}
    title = str(front.get("title") or "").strip() or first_h1 or file_stem(raw.key)
    return [make_document(raw, "markdown", title, sections, source_uris, meta)]
