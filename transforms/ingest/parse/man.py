"""groff man pages -> Document, in pure Python (groff may not be installed on workers).

Covers the man(7) macro set, the common escapes and tbl; anything else degrades to its
argument text rather than failing.
"""
from __future__ import annotations

import posixpath
import re
from typing import Optional

from transforms.ingest.parse.base import ParseError, SectionBuilder, decode_text, make_document, norm_lines
from transforms.records import Document, RawObject, Section

_CHARS = {
    "em": "—", "en": "–", "hy": "-", "mi": "-", "aq": "'", "dq": '"', "lq": "“", "rq": "”",
    "oq": "‘", "cq": "’", "bu": "•", "co": "©", "rg": "®", "tm": "™", "mu": "×", "di": "÷",
    "+-": "±", "<=": "≤", ">=": "≥", "!=": "≠", "==": "≡", "->": "→", "<-": "←", "<>": "↔",
    "ga": "`", "ha": "^", "ti": "~", "rs": "\\", "sl": "/", "ba": "|", "br": "|", "de": "°",
    "ua": "↑", "da": "↓", "sc": "§", "ps": "¶", "dg": "†", "dd": "‡", "fm": "′", "sq": "□",
    "lh": "☜", "rh": "☞", "OK": "✓", "Fo": "«", "Fc": "»", "fo": "‹", "fc": "›", "ct": "¢",
    "Eu": "€", "eu": "€", "Po": "£", "Ye": "¥", "ss": "ß", "ae": "æ", "AE": "Æ", "'e": "é",
    "`e": "è", "'a": "á", ":u": "ü", ":o": "ö", ":a": "ä", ",c": "ç", "~n": "ñ", "12": "½",
    "14": "¼", "34": "¾", "*a": "α", "*b": "β", "*m": "μ", "*p": "π", "if": "∞", "pl": "+",
    "eq": "=", "lt": "<", "gt": ">", "at": "@", "sh": "#", "Do": "$", "ul": "_", "ru": "_",
    "bv": "|", "or": "|", "ci": "○", "nb": "", "pc": "·", "ap": "~",
}
_STRINGS = {"lq": "“", "rq": "”", "R": "®", "Tm": "™", "Lq": "“", "Rq": "”", "aq": "'"}
_ESC = re.compile(r"""\\(?:
      f(?:\[[^\]]*\]|\(..|.)                       # font change
    | \((?P<c2>..) | \[(?P<cl>[^\]]*)\]            # special character
    | \*(?:\((?P<s2>..)|\[(?P<sl>[^\]]*)\]|(?P<s1>.))   # string
    | s(?:[-+]?\(\d\d|\[[^\]]*\]|'[^']*'|[-+]?\d)   # point size
    | n[-+]?(?:\(..|\[[^\]]*\]|.)                   # number register
    | N'(?P<num>\d+)'                               # character by number
    | [hvwoLlXDZbxRSH](?P<q>.).*?(?P=q)             # drawing / motion / width
    | [kzg](?:\(..|\[[^\]]*\]|.)                    # marks, zero-width char
    | \$[0-9*@]                                     # macro arguments
    | (?P<one>.)
)""", re.X | re.S)
_ONE = {"e": "\\", "\\": "\\", "-": "-", "&": "", " ": " ", "~": " ", "0": " ", "|": "",
        "^": "", "%": "", ":": "", "/": "", ",": "", ".": ".", "'": "'", "`": "`",
        "c": "\x01", "t": "\t", "a": "", "d": "", "u": "", "r": "", "p": "", "E": "\\",
        "}": "", "{": "", "!": "", "?": ""}
_FONT_JOIN = {"BR", "BI", "IB", "IR", "RB", "RI"}
_FONT_SPACE = {"B", "I", "SM", "SB", "R", "CW"}
_IGNORE = {
    "in", "ad", "na", "nh", "hy", "PD", "ft", "ta", "ti", "ne", "bp", "UC", "ll", "ns", "rs",
    "INDENT", "UNINDENT", "RS", "RE", "ds", "nr", "rm", "rr", "so", "tr", "cs", "ss", "ps",
    "vs", "pl", "lt", "po", "hc", "hw", "mk", "rt", "ev", "ec", "eo", "cc", "c2", "it",
    "wh", "ch", "fam", "fp", "ul", "cu", "ce", "lf", "pc", "ab", "tm", "mso", "warn", "DT",
    "AT", "UE", "ME", "YS", "T", "Ve", "Vb", "LO", "ie", "el", "if", "em", "am", "als",
    "\\}", "EN", "ig", "TE", "Id", "PU", "owner", "cp", "do", "hla", "hlm", "ss", "kern",
}
_PARA = {"PP", "LP", "P", "HP", "sp", "SY", "Sp"}
_BULLETS = {"•", "*", "-", "o", "·", "+", "—", "–"}
_SO = re.compile(r"^\.so\s+(\S+)\s*$")


def unescape(s: str) -> str:
    """Resolve roff escapes to plain text (fonts and sizes vanish)."""
    def rep(m: re.Match) -> str:
        if m.group("c2") is not None or m.group("cl") is not None:
            name = m.group("c2") if m.group("c2") is not None else m.group("cl")
            if name.startswith(("u", "U")) and re.fullmatch(r"[uU][0-9A-Fa-f]{4,6}(_[0-9A-Fa-f]{4,6})*", name):
                return "".join(chr(int(p.lstrip("uU"), 16)) for p in name.split("_"))
            if name.startswith("char") and name[4:].isdigit():
                return chr(int(name[4:]))
            return _CHARS.get(name, "")
        s_name = m.group("s2") or m.group("sl") or m.group("s1")
        if s_name is not None:
            return _STRINGS.get(s_name, "")
        if m.group("num") is not None:
            try:
                return chr(int(m.group("num")))
            except ValueError:
                return ""
        one = m.group("one")
        if one is not None:
            return _ONE.get(one, one)
        return ""
    return _ESC.sub(rep, s)


def _args(rest: str) -> list[str]:
    """Macro arguments: space separated; "double quoted" may hold spaces, "" is a quote."""
    args: list[str] = []
    i, n = 0, len(rest)
    while i < n:
        while i < n and rest[i] in " \t":
            i += 1
        if i >= n:
            break
        if rest[i] == '"':
            i += 1
            buf = []
            while i < n:
                if rest[i] == '"':
                    if i + 1 < n and rest[i + 1] == '"':
                        buf.append('"')
                        i += 2
                        continue
                    i += 1
                    break
                buf.append(rest[i])
                i += 1
            args.append("".join(buf))
        else:
            j = i
            while j < n and rest[j] not in " \t":
                j += 2 if rest[j] == "\\" else 1  # "\ " is an escaped space, not a separator
            args.append(rest[i:j])
            i = j
    return args


def _macro(line: str) -> tuple[str, list[str]]:
    body = line[1:].lstrip(" \t")
    name, _, rest = body.partition(" ")
    if "\t" in name:
        name, _, more = name.partition("\t")
        rest = more + " " + rest
    return name, _args(rest)


def _font_text(name: str, args: list[str]) -> str:
    if name in _FONT_JOIN:
        return "".join(args)
    return " ".join(args)


def _strip_comment(line: str) -> Optional[str]:
    """None for whole-line comments; else the line minus any trailing \\" comment."""
    if line.startswith((".\\\"", "'\\\"", "\\\"", ".\\#", "\\#")) or line.rstrip() == ".":
        return None
    pos = line.find('\\"')
    while pos > 0 and line[pos - 1] == "\\":  # \\" is an escaped backslash, not a comment
        pos = line.find('\\"', pos + 2)
    if pos >= 0:
        line = line[:pos].rstrip()
        if line in (".", "'", ""):
            return None
    return line


def _logical_lines(text: str) -> list[str]:
    """Source lines with comments removed and \\<newline> continuations joined."""
    out: list[str] = []
    pending = ""
    for raw_line in text.split("\n"):
        line = pending + raw_line
        pending = ""
        if line.endswith("\\") and not line.endswith("\\\\"):
            pending = line[:-1]
            continue
        stripped = _strip_comment(line)
        if stripped is not None:
            out.append(stripped)
    if pending:
        out.append(pending)
    return out


def _tbl(lines: list[str]) -> list[str]:
    """A .TS/.TE block (without the delimiters) as rough ' | '-separated text rows."""
    tab = "\t"
    i = 0
    if lines and lines[0].rstrip().endswith(";"):
        m = re.search(r"tab\s*\((.)\)", lines[0])
        if m:
            tab = m.group(1)
        i = 1
    while i < len(lines) and not lines[i].rstrip().endswith("."):  # format lines
        i += 1
    i += 1
    rows: list[str] = []
    cells: list[str] = []
    block: Optional[list[str]] = None  # inside T{ ... T}
    while i < len(lines):
        line = lines[i]
        i += 1
        if block is not None:
            if line.startswith("T}"):
                cells.append(" ".join(block))
                block = None
                rest = line[2:]
                if rest.startswith(tab):
                    parts = rest[1:].split(tab)
                    if parts and parts[-1].rstrip().endswith("T{"):
                        cells.extend(parts[:-1] + [parts[-1].rstrip()[:-2]])
                        block = []
                        continue
                    cells.extend(parts)
                if block is None:
                    rows.append(" | ".join(c.strip() for c in map(unescape, cells) if c.strip()))
                    cells = []
            elif line.startswith((".", "'")):
                name, args = _macro(line)
                if args and name not in _IGNORE:
                    block.append(_font_text(name, args))
            else:
                block.append(line)
            continue
        if line.startswith(".T&"):
            while i < len(lines) and not lines[i].rstrip().endswith("."):
                i += 1
            i += 1
            continue
        if line.strip() in ("_", "=", "\\_", "") or line.startswith((".", "'")):
            continue
        parts = line.split(tab)
        if parts[-1].rstrip().endswith("T{"):
            cells = parts[:-1] + [parts[-1].rstrip()[:-2]]
            block = []
            continue
        rows.append(" | ".join(c.strip() for c in map(unescape, parts) if c.strip()))
    return [r.replace("\x01", "") for r in rows if r]


class _Page:
    """Builds sections from the macro stream."""

    def __init__(self) -> None:
        self.out = SectionBuilder()
        self.sh = ""
        self.pieces: list[str] = []
        self.nofill = False
        self.break_after_next = False  # .TP: the next line is a tag, then a line break
        self.heading_next: Optional[str] = None  # .SH/.SS without args: next line is the heading

    def para(self) -> None:
        if self.pieces:
            text = "".join(self.pieces)
            text = re.sub("\x01\\s*", "", text)  # \c joins with what follows
            self.out.add(text.rstrip() if self.nofill else norm_lines(text))
        self.pieces = []

    def brk(self) -> None:
        if self.pieces:
            self.pieces.append("\n")

    def text(self, s: str) -> None:
        if self.heading_next is not None:
            kind, self.heading_next = self.heading_next, None
            self.heading(kind, s)
            return
        if self.nofill:
            self.pieces.append(s + "\n")
        else:
            if s.startswith((" ", "\t")):
                self.brk()
            self.pieces.append(s + " ")
        if self.break_after_next:
            self.break_after_next = False
            self.brk()

    def heading(self, kind: str, text: str) -> None:
        self.para()
        text = " ".join(text.replace("\x01", "").split())
        if kind == "SH":
            self.sh = text
            self.out.start([text])
        else:
            self.out.start([self.sh, text] if self.sh else [text])


def _redirect(raw: RawObject, target: str, source_uris, meta) -> Document:
    base = posixpath.basename(target)
    name, _, sect = base.partition(".")
    see = f"{name}({sect})" if sect else name
    meta = dict(meta, redirect=target)
    return make_document(raw, "man", _own_name(raw.key), [Section([], f"See {see}.")],
                         source_uris, meta)


def _own_name(key: str) -> str:
    base = posixpath.basename(key)
    name, dot, sect = base.rpartition(".")
    return f"{name}({sect})" if dot and name else base


def _last_ends(lines: list[str]) -> dict[str, int]:
    """The index of the last line that ends each kind of skipped block (-1: none), as parse_man's
    skip loop recognises them, found in one pass."""
    last = {"..": -1, ".EN": -1, "\\}": -1, ".TE": -1}
    for j, line in enumerate(lines):
        head = line.strip()
        for end in ("..", ".EN"):
            if head.startswith(end):
                last[end] = j
        if "\\}" in line:
            last["\\}"] = j
        if line.startswith(".TE"):
            last[".TE"] = j
    return last


def parse_man(raw: RawObject, source_uris: Optional[list[str]] = None) -> list[Document]:
    lines = _logical_lines(decode_text(raw.data))
    content = [ln for ln in lines if ln.strip()]
    if len(content) == 1 and _SO.match(content[0]):
        return [_redirect(raw, _SO.match(content[0]).group(1), source_uris, {})]

    page = _Page()
    meta: dict = {}
    title = ""
    i = 0
    skip_until: Optional[str] = None  # .de ... ..   /  .EQ ... .EN   /  \{ ... \}
    # Where each block's end last appears: a block that is never closed (a .de without "..",
    # a \{ without \}, an .EQ without .EN, a .TS without .TE) is not skipped, so the text after
    # it is kept (groff would swallow it all; issue 35, item 15).
    last_end = _last_ends(lines)
    while i < len(lines):
        line = lines[i]
        i += 1
        if skip_until is not None:
            if line.strip().startswith(skip_until) or (skip_until == "\\}" and "\\}" in line):
                skip_until = None
            continue
        if not line.startswith((".", "'")):
            if not line.strip():
                if page.nofill:
                    page.pieces.append("\n")
                else:
                    page.para()
                continue
            page.text(unescape(line))
            continue
        name, args = _macro(line)
        if name == "TH":
            title = f"{args[0]}({args[1]})" if len(args) > 1 else (args[0] if args else "")
            for k, idx in (("name", 0), ("section", 1), ("date", 2), ("source", 3), ("manual", 4)):
                if len(args) > idx and args[idx].strip():
                    meta[k] = unescape(args[idx]).strip()
        elif name in ("SH", "SS"):
            if args:
                page.heading(name, unescape(" ".join(args)))
            else:
                page.para()
                page.heading_next = name
        elif name in _FONT_JOIN or name in _FONT_SPACE:
            if args:
                page.text(unescape(_font_text(name, args)))
        elif name in _PARA:
            page.para()
            if name == "SY" and args:
                page.text(unescape(" ".join(args)))
        elif name in ("TP", "TQ"):
            if name == "TP":
                page.para()
            page.break_after_next = True
        elif name == "IP":
            page.para()
            tag = unescape(args[0]).strip() if args else ""
            if tag in _BULLETS:
                page.pieces.append("- ")
            elif tag:
                page.text(tag)
                page.brk()
        elif name in ("nf", "EX"):
            page.para()
            page.nofill = True
        elif name in ("fi", "EE"):
            page.para()
            page.nofill = False
        elif name == "br":
            page.brk()
        elif name == "TS":
            if last_end[".TE"] < i:
                continue  # no .TE follows: its lines are read as text
            page.para()
            end = next((j for j in range(i, len(lines)) if lines[j].startswith(".TE")), len(lines))
            rows = _tbl(lines[i:end])
            if rows:
                page.out.add("\n".join(rows))
            i = end + 1
        elif name in ("de", "de1", "am"):
            if last_end[".."] >= i:
                skip_until = ".."
        elif name == "EQ":
            if last_end[".EN"] >= i:
                skip_until = ".EN"
        elif name in ("ie", "if", "el") or name.startswith(("ie", "if", "el")):
            if "\\{" in line and "\\}" not in line and last_end["\\}"] >= i:
                skip_until = "\\}"
        elif name in ("UR", "MT"):
            pass  # the link text follows; the URL itself adds little to retrieval
        elif name == "OP":
            page.text("[" + unescape(" ".join(args)) + "]")
        elif name in _IGNORE or not name:
            continue
        elif args:  # unknown (page-defined) macro: keep its words
            page.text(unescape(" ".join(args)))
    page.para()
    sections = page.out.finish()

    if not title:
        title = _own_name(raw.key)
    name_sec = next((s.text for s in sections if s.heading_path[:1] == ["NAME"]), "")
    if name_sec:
        meta["summary"] = " ".join(name_sec.split())[:300]
    if not sections:
        raise ParseError("no text extracted")
    return [make_document(raw, "man", title, sections, source_uris, meta)]
