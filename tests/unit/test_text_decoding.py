"""Every text encoding read or refused by name: UTF-16 and UTF-32 by their byte order mark,
cp1252 for text that is not UTF-8 and never a C1 control character, and man pages with a block
that never ends. Each test is about the class, not one file."""
from __future__ import annotations

import codecs
import json
import re

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from transforms.common.decode import DecodeError, decode_document, decode_lenient
from transforms.ingest.parse import ParseError, parse_object_with_errors
from transforms.records import RawObject

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
C1 = re.compile("[\u0080-\u009f]")
BOMS = {"utf-8-sig": b"", "utf-16": b"", "utf-32": b"",
        "utf-16-le": codecs.BOM_UTF16_LE, "utf-16-be": codecs.BOM_UTF16_BE,
        "utf-32-le": codecs.BOM_UTF32_LE, "utf-32-be": codecs.BOM_UTF32_BE}


def _encode(text: str, encoding: str) -> bytes:
    return BOMS[encoding] + text.encode(encoding)


def _raw(key: str, data: bytes) -> RawObject:
    return RawObject.from_bytes(f"file:///corpus/{key}", key, data)


def _texts(docs) -> list[str]:
    return [s.text for d in docs for s in d.sections]


# Words of text a document may hold: letters from several scripts, no control characters.
WORD = st.text(alphabet=st.characters(whitelist_categories=("Lu", "Ll", "Nd"), max_codepoint=0x2FFFF),
               min_size=1, max_size=12)
PARAGRAPHS = st.lists(st.lists(WORD, min_size=1, max_size=8).map(" ".join), min_size=1, max_size=5)


# --- UTF-16 / UTF-32 by their byte order mark -----------------------------------------------------

@SETTINGS
@given(paras=PARAGRAPHS, encoding=st.sampled_from(sorted(BOMS)),
       ext=st.sampled_from(["txt", "md", "html", "jsonl"]))
def test_a_file_with_a_byte_order_mark_reads_as_its_utf8_twin(paras, encoding, ext):
    if ext == "html":
        text = "<html><body>" + "".join(f"<p>{p}</p>" for p in paras) + "</body></html>\n"
    elif ext == "jsonl":
        text = "".join(json.dumps({"id": f"r{i}", "text": p}, ensure_ascii=False) + "\n" for i, p in enumerate(paras))
    else:
        text = "\n\n".join(paras) + "\n"
    utf8 = parse_object_with_errors(_raw(f"a.{ext}", text.encode("utf-8")))
    wide = parse_object_with_errors(_raw(f"a.{ext}", _encode(text, encoding)))
    assert _texts(wide[0]) == _texts(utf8[0]) and wide[1] == utf8[1] == []
    assert [d.format for d in wide[0]] == [d.format for d in utf8[0]]


@SETTINGS
@given(body=st.binary(min_size=1, max_size=64), encoding=st.sampled_from(
    ["UTF-16-LE", "UTF-16-BE", "UTF-32-LE", "UTF-32-BE"]))
def test_a_file_its_byte_order_mark_cannot_decode_is_refused_naming_the_encoding(body, encoding):
    bom = {"UTF-16-LE": codecs.BOM_UTF16_LE, "UTF-16-BE": codecs.BOM_UTF16_BE,
           "UTF-32-LE": codecs.BOM_UTF32_LE, "UTF-32-BE": codecs.BOM_UTF32_BE}[encoding]
    data = bom + body
    try:
        text = codecs.decode(body, encoding.lower())
    except UnicodeDecodeError:
        text = None
    if text is None and encoding == "UTF-32-LE":
        return  # FF FE 00 00 may also be UTF-16-LE text starting with U+0000: tried as that
    if text is None:
        with pytest.raises(ParseError, match=f"not valid {encoding} text"):
            parse_object_with_errors(_raw("a.txt", data))
        with pytest.raises(DecodeError, match=encoding):
            decode_document(data)
    else:  # it decodes: a document, or refused for what it holds, never as "binary content: NUL"
        try:
            parse_object_with_errors(_raw("a.txt", data))
        except ParseError as e:
            assert "NUL bytes" not in str(e)


# --- cp1252, never C1 controls --------------------------------------------------------------------

CP1252_TEXT = st.text(alphabet=st.sampled_from(
    [chr(c) for c in range(0x20, 0x7F)] + list("€‚ƒ„…†‡ˆ‰Š‹ŒŽ‘’“”•–—˜™š›œžŸ") +
    [chr(c) for c in range(0xA0, 0x100)]), min_size=1, max_size=60)


@SETTINGS
@given(text=CP1252_TEXT)
def test_text_that_is_not_utf8_reads_as_cp1252(text):
    data = text.encode("cp1252")
    try:
        data.decode("utf-8")
        return  # valid UTF-8 is read as UTF-8
    except UnicodeDecodeError:
        pass
    assert decode_lenient(data) == text
    from transforms.common.decode import bom_encoding
    if bom_encoding(data) is None:  # "þÿ" is b"\xfe\xff", a UTF-16 byte order mark: the mark wins
        assert decode_document(data) == text


@SETTINGS
@given(data=st.binary(max_size=200))
def test_no_decoded_document_holds_a_c1_control_character(data):
    for head in (b"", codecs.BOM_UTF8, codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE):
        try:
            text = decode_document(head + data)
        except DecodeError:
            continue
        assert not C1.search(text)


@SETTINGS
@given(words=st.lists(st.sampled_from(["price", "€5", "“quoted”", "it’s", "a—b", "naïve", "…", "Œuvre"]),
                      min_size=3, max_size=20))
def test_a_windows_1252_document_keeps_its_punctuation(words):
    text = " ".join(words) + "\n"
    for ext in ("txt", "md"):
        docs, _ = parse_object_with_errors(_raw(f"w.{ext}", text.encode("cp1252")))
        body = " ".join(_texts(docs))
        assert not C1.search(body)
        if not _utf8(text.encode("cp1252")):
            assert body == text.strip()


def _utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def test_c1_characters_in_utf8_text_become_the_cp1252_characters_they_stood_for():
    docs, _ = parse_object_with_errors(_raw("m.txt", "a \u0093quoted\u0094 \u0080 5\n".encode("utf-8")))
    assert _texts(docs) == ["a “quoted” € 5"]


# --- man pages with a block that never ends -------------------------------------------------------

UNTERMINATED = st.sampled_from([".de XX\n.B inside", ".de1 YY", ".am ZZ", ".if n \\{\\\n.ds a b",
                                ".ie t \\{\\\n.ft B", ".EQ\ndelim $$", ".TS\nl l."])
LOWER_WORD = st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=3, max_size=10)


@SETTINGS
@given(before=st.lists(LOWER_WORD, min_size=1, max_size=6), after=st.lists(LOWER_WORD, min_size=1, max_size=30),
       block=UNTERMINATED, sections=st.integers(1, 3))
def test_a_man_page_keeps_the_text_after_a_block_that_never_ends(before, after, block, sections):
    per = max(1, len(after) // sections)
    rest = "".join(f".SH PART{i}\n" + " ".join(after[i * per:(i + 1) * per] or ["tail"]) + "\n.PP\n"
                   for i in range(sections))
    rest += " ".join(after[sections * per:]) + "\n"
    page = f'.TH TOOL 1\n.SH NAME\ntool \\- {" ".join(before)}\n{block}\n{rest}'
    docs, _ = parse_object_with_errors(_raw("tool.1", page.encode()))
    words = set(" ".join(_texts(docs)).split())
    assert set(after) <= words
    assert {f"PART{i}" for i in range(sections)} <= {p for d in docs for s in d.sections for p in s.heading_path}


def test_a_terminated_macro_definition_is_still_skipped():
    page = ".TH TOOL 1\n.SH NAME\ntool \\- x\n.de XX\nsecretbody\n..\n.SH DESCRIPTION\nvisible\n"
    words = " ".join(_texts(parse_object_with_errors(_raw("tool.1", page.encode()))[0]))
    assert "visible" in words and "secretbody" not in words


# --- whatever put it there, no parsed document holds a C1 control character -------------------


C1_CHAR = st.integers(0x80, 0x9F)


@SETTINGS
@given(codes=st.lists(C1_CHAR, min_size=1, max_size=5), words=st.lists(LOWER_WORD, min_size=1, max_size=5),
       how=st.sampled_from(["html", "jsonl", "man", "utf8"]))
def test_no_parsed_document_holds_a_c1_control_character_whatever_put_it_there(codes, words, how):
    text = " ".join(words)
    if how == "html":
        key, data = "c.html", ("<html><body><h1>" + "".join(f"&#{c};" for c in codes) + "</h1><p>" + text +
                               "".join(f"&#{c};" for c in codes) + "</p></body></html>").encode()
    elif how == "jsonl":
        key, data = "c.jsonl", json.dumps({"id": "r", "title": "".join(map(chr, codes)),
                                           "text": text + "".join(map(chr, codes))}).encode() + b"\n"
    elif how == "man":
        key, data = "c.1", (".TH C 1\n.SH NAME" + "".join(f"\\N'{c}'" for c in codes) + "\n" + text +
                            "".join(f"\\N'{c}'" for c in codes) + "\n").encode()
    else:
        key, data = "c.txt", (text + "".join(map(chr, codes)) + "\n").encode("utf-8")
    docs, _ = parse_object_with_errors(_raw(key, data))
    for d in docs:
        assert not C1.search(d.title)
        for s in d.sections:
            assert not C1.search(s.text) and not any(C1.search(h) for h in s.heading_path)
