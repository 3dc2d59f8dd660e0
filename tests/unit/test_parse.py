"""Parsers on the real sample corpus (samples/corpus)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from transforms.records import record_doc_id, record_id_of

from transforms.ingest.parse import (PARSER_VERSION, ParseError, parse_object,
                              parse_object_with_errors, sniff_format)
from transforms.records import RawObject, sha256_hex, stable_id

CORPUS = Path(__file__).resolve().parents[2] / "samples" / "corpus"


def raw_of(key: str, as_key: str | None = None, data: bytes | None = None) -> RawObject:
    path = CORPUS / key
    k = as_key or key
    return RawObject.from_bytes(f"file://{path}", k, path.read_bytes() if data is None else data,
                                mtime=1700000000.0)


def one(key: str, **kw):
    docs = parse_object(raw_of(key, **kw))
    assert len(docs) == 1
    return docs[0]


def section(doc, *path):
    hits = [s for s in doc.sections if s.heading_path[-len(path):] == list(path)]
    assert hits, f"no section {path} in {[s.heading_path for s in doc.sections]}"
    return "\n\n".join(s.text for s in hits)


# --- common Document fields ---------------------------------------------------------

def test_document_fields_from_raw():
    raw = raw_of("python/library/json.html")
    doc = parse_object(raw, ["s3://b/python/library/json.html", "s3://b/mirror/json.html"])[0]
    assert doc.doc_id == stable_id("doc", "python/library/json.html")
    assert doc.content_hash == raw.content_hash == sha256_hex(raw.data) == doc.source_hash
    assert doc.source_uri == raw.uri and doc.key == raw.key
    assert doc.source_uris == ["s3://b/python/library/json.html", "s3://b/mirror/json.html"]
    assert doc.size == raw.size and doc.mtime == 1700000000.0
    assert doc.metadata["format"] == "html" and doc.metadata["key"] == raw.key
    assert doc.acl == []
    assert isinstance(PARSER_VERSION, str) and PARSER_VERSION
    # Default source_uris: just the object's own uri.
    assert parse_object(raw)[0].source_uris == [raw.uri]


def test_no_empty_sections_anywhere():
    for path in CORPUS.rglob("*"):
        if path.is_file() and "broken" not in path.parts:
            key = str(path.relative_to(CORPUS))
            for doc in parse_object(raw_of(key)):
                assert doc.title.strip(), key
                assert doc.sections and all(s.text.strip() for s in doc.sections), key


# --- HTML -------------------------------------------------------------------------------

def test_html_sphinx_page():
    doc = one("python/library/json.html")
    assert doc.format == "html"
    assert doc.title == "json — JSON encoder and decoder"  # " — Python 3.11.2 documentation" gone
    assert doc.metadata["lang"] == "en"
    text = doc.text
    # Boilerplate gone: sidebar, related-nav, footer, headerlink pilcrows, scripts.
    for junk in ("Table of Contents", "Previous topic", "This Page", "Show Source",
                 "Python Software Foundation", "¶", "Navigation", "copybutton"):
        assert junk not in text, junk
    # Headings become the heading path; function signatures stay as text.
    basic = section(doc, "json — JSON encoder and decoder", "Basic Usage")
    assert "json.dumps(obj, *, skipkeys=False" in basic
    assert any(s.heading_path == ["json — JSON encoder and decoder", "Command Line Interface",
                                  "Command line options"] for s in doc.sections)
    # The JSON -> Python conversion table as a Markdown table.
    assert "| JSON | Python |\n|---|---|\n| object | dict |\n| array | list |" in text
    # pre blocks verbatim (indentation kept).
    assert '>>> print(json.dumps({\'4\': 5, \'6\': 7}, sort_keys=True, indent=4))\n{\n    "4": 5,' in text
    # Paragraph text has its source line breaks folded.
    assert "JSON (JavaScript Object Notation), specified by RFC 7159" in text


def test_html_docbook_page_drops_navigation_and_keeps_tables():
    doc = one("debian-reference/ch08.en.html")
    assert doc.title == "Chapter 8. I18N and L10N"
    assert doc.sections[0].heading_path == ["Chapter 8. I18N and L10N"]
    text = doc.text
    assert "Prev" not in text.split() and "Home" not in text.split()  # navheader/navfooter
    assert "Table of Contents" not in text  # div.toc
    assert "| package | popcon | size | supported locale |\n|---|---|---|---|" in text
    # Admonition layout tables come out as plain lines, not a fake table.
    assert "Tip\nThere are 17, 18, or 10 letters" in text
    assert any(s.heading_path[-1] == "8.1.2. The reconfiguration of the locale" for s in doc.sections)


def test_html_lists_as_dash_items():
    doc = one("debian-reference/ch08.en.html")
    assert "- Internationalization (I18N): To make a software potentially handle multiple locales." in doc.text


# --- Markdown ---------------------------------------------------------------------------

def test_markdown_node_api():
    doc = one("nodejs/api/path.md")
    assert doc.format == "markdown" and doc.title == "Path"
    assert "introduced_in" not in doc.text and "<!--" not in doc.text
    basename = section(doc, "Path", "path.basename(path[, suffix])")
    assert "path.basename('/foo/bar/baz/asdf/quux.html', '.html');\n// Returns: 'quux'" in basename
    assert "- suffix {string} An optional suffix to remove" in basename
    assert "[`path.win32`][]" not in doc.text and "use path.win32:" in doc.text


def test_markdown_front_matter_and_table():
    md = (b"---\ntitle: Release notes\ndescription: What changed\n---\n"
          b"Intro text.\n\n## Limits\n\n| limit | value |\n|---|---|\n| uploads | 50 MB |\n")
    doc = parse_object(RawObject.from_bytes("file:///x/notes.md", "notes.md", md))[0]
    assert doc.title == "Release notes"
    assert doc.metadata["description"] == "What changed"
    assert section(doc, "Limits") == "| limit | value |\n|---|---|\n| uploads | 50 MB |"
    # No heading at all: the title falls back to the file stem.
    plain = parse_object(RawObject.from_bytes("file:///x/howto.md", "howto.md", b"just text\n"))[0]
    assert plain.title == "howto"


# --- PDF --------------------------------------------------------------------------------

def test_pdf_pages():
    doc = one("pdf/fhs-3.0.pdf")
    assert doc.format == "pdf"
    assert doc.title == "Filesystem Hierarchy Standard"  # no /Title: first line
    assert doc.metadata["pages"] == 50
    pages = [s.page for s in doc.sections]
    assert pages[0] == 1 and pages == sorted(pages) and max(pages) == 50
    var = [s for s in doc.sections if "/var is specified here in order to make it possible" in s.text]
    assert var and all(s.page and s.page > 30 for s in var)


def test_pdf_truncated_is_a_parse_error():
    with pytest.raises(ParseError, match="PDF"):
        parse_object(raw_of("broken/truncated.pdf"))


def test_pdf_sniffed_without_extension():
    raw = raw_of("pdf/fhs-3.0.pdf", as_key="downloads/fhs")
    assert sniff_format(raw.key, raw.data) == "pdf"


# --- man --------------------------------------------------------------------------------

def test_man_ldd():
    doc = one("man/man1/ldd.1")
    assert doc.format == "man" and doc.title == "ldd(1)"
    assert doc.metadata["section"] == "1" and doc.metadata["date"] == "2023-02-05"
    assert doc.metadata["source"] == "Linux man-pages 6.03"
    assert section(doc, "NAME") == "ldd - print shared object dependencies"
    assert section(doc, "SYNOPSIS") == "ldd [option]... file..."
    options = section(doc, "OPTIONS")
    assert "-v, --verbose\nPrint all information" in options  # .TP tag, then its body
    assert "--version\nPrint the version number of ldd." in options
    assert ["DESCRIPTION", "Security"] in [s.heading_path for s in doc.sections]
    # .EX block verbatim; font escapes and \- gone.
    assert "$ ldd /bin/ls\n    linux-vdso.so.1 (0x00007ffcc3563000)" in doc.text
    assert "\\f" not in doc.text and "\\-" not in doc.text and ".BR" not in doc.text


def test_man_tbl_and_synopsis():
    ascii7 = one("man/man7/ascii.7")
    assert "101 | 65 | 41 | A" in ascii7.text  # tbl rows
    read2 = one("man/man2/read.2")
    assert "ssize_t read(int fd, void buf[.count], size_t count);" in section(read2, "SYNOPSIS")
    assert "read() returns zero" in section(read2, "DESCRIPTION")


def test_man_so_redirect():
    doc = one("man/man3/globfree.3")
    assert doc.text == "See glob(3)."
    assert doc.metadata["redirect"] == "man3/glob.3"
    assert doc.title == "globfree(3)"


def test_man_escapes_unit():
    src = (b'.TH demo 7 2024-01-01 "demo"\n.SH NAME\ndemo \\- show \\(em escapes\n'
           b'.SH DESCRIPTION\n.BR foo (1),\n\\*(lqquoted\\*(rq \\fBbold\\fP \\f[I]it\\f[]\n'
           b'.I a b\nx\\e\\&y \\(aqq\\(aq \\(co\n')
    doc = parse_object(RawObject.from_bytes("file:///x/demo.7", "demo.7", src))[0]
    assert section(doc, "NAME") == "demo - show — escapes"
    assert section(doc, "DESCRIPTION") == "foo(1), “quoted” bold it a b x\\y 'q' ©"


# --- text -------------------------------------------------------------------------------

def test_text_asciidoc_headings():
    doc = one("git/git-add.txt")
    assert doc.format == "text" and doc.title == "git-add(1)"
    assert section(doc, "git-add(1)", "NAME") == "git-add - Add file contents to the index"
    assert "This command updates the index using the current content found in the working tree" \
        in section(doc, "DESCRIPTION")
    assert "OPTIONS" in [s.heading_path[-1] for s in doc.sections]


# --- JSONL ------------------------------------------------------------------------------

def test_jsonl_records():
    raw = raw_of("records/faq.jsonl")
    docs, errors = parse_object_with_errors(raw)
    assert errors == [] and len(docs) == 15
    by_id = {d.metadata["record_id"]: d for d in docs}
    assert all(d.doc_id == record_doc_id("records/faq.jsonl", rid) and record_id_of(d.doc_id) == rid
               for rid, d in by_id.items())
    faq1 = by_id["faq-001"]
    assert faq1.format == "jsonl" and faq1.title == "What does error ERR_CONN_4042 mean?"
    assert "ERR_CONN_4042" in faq1.text and faq1.acl == []
    assert faq1.metadata["product"] == "ragbeam-gateway" and "text" not in faq1.metadata
    assert faq1.metadata["record_id"] == "faq-001"
    assert by_id["faq-007"].acl == ["staff"]
    assert by_id["faq-014"].acl == ["staff", "auditors"]
    first_line = raw.data.split(b"\n")[0]
    assert faq1.content_hash == sha256_hex(first_line) != raw.content_hash
    assert faq1.source_hash == raw.content_hash


def test_jsonl_record_ids_are_unique_per_file():
    """The same record id in two files, or one equal to another file's path-derived id, names
    distinct documents; the record's own id stays visible as metadata.record_id."""
    from transforms.records import stable_id
    line = b'{"id": "%s", "text": "same id, other file"}\n'
    a = parse_object(RawObject.from_bytes("file:///x/a.jsonl", "a.jsonl", line % b"r1"))[0]
    b = parse_object(RawObject.from_bytes("file:///x/b.jsonl", "b.jsonl", line % b"r1"))[0]
    path_id = stable_id("doc", "notes.txt")  # what a plain file's doc_id is
    c = parse_object(RawObject.from_bytes("file:///x/c.jsonl", "c.jsonl", line % path_id.encode()))[0]
    assert a.doc_id != b.doc_id and a.metadata["record_id"] == b.metadata["record_id"] == "r1"
    assert c.doc_id != path_id and c.metadata["record_id"] == path_id
    assert record_id_of(path_id) is None and record_id_of(c.doc_id) == path_id
    tricky = parse_object(RawObject.from_bytes("file:///x/d.jsonl", "d.jsonl", line % b"x@0123456789ab"))[0]
    assert record_id_of(tricky.doc_id) == "x@0123456789ab"


def test_jsonl_bad_lines_reported():
    good = (CORPUS / "records" / "faq.jsonl").read_bytes()
    data = good + b'{"title": "no id here", "text": "x"}\n{"id": "x1"}\nnot json\n'
    raw = RawObject.from_bytes("file:///x/faq.jsonl", "records/faq.jsonl", data)
    docs, errors = parse_object_with_errors(raw)
    assert len(docs) == 15
    assert errors[0] == "line 16: missing id"
    assert errors[1] == "line 17: missing text"
    assert errors[2].startswith("line 18: invalid JSON")
    # An unchanged record keeps its hash when the file around it changes.
    assert docs[0].content_hash == parse_object(raw_of("records/faq.jsonl"))[0].content_hash
    # A title-less record is titled by its id.
    solo = RawObject.from_bytes("file:///x/a.jsonl", "a.jsonl", b'{"_id": 7, "text": "hello"}\n')
    assert parse_object(solo)[0].title == "7" and record_id_of(parse_object(solo)[0].doc_id) == "7"
    # Nothing usable: the whole file is a parse error.
    bad = RawObject.from_bytes("file:///x/b.jsonl", "b.jsonl", b'{"text": "no id"}\n')
    with pytest.raises(ParseError, match="no valid records.*line 1: missing id"):
        parse_object(bad)


# --- sniffing and failures ---------------------------------------------------------------

@pytest.mark.parametrize("key,as_key,expected", [
    ("python/library/json.html", "notes/page.txt", "html"),  # HTML bytes under a .txt name
    ("debian-reference/apa.en.html", None, "html"),  # <?xml ...?> + XHTML doctype
    ("man/man3/glob.3", "glob", "man"),  # roff without a man extension
    ("man/man3/globfree.3", None, "man"),
    ("records/faq.jsonl", "records/faq.txt", "jsonl"),  # every line is a JSON object
    ("nodejs/api/path.md", None, "markdown"),
    ("git/git-add.txt", None, "text"),
    ("pdf/fhs-3.0.pdf", "fhs.html", "pdf"),  # bytes win over the extension
])
def test_sniff(key, as_key, expected):
    raw = raw_of(key, as_key=as_key)
    assert sniff_format(raw.key, raw.data) == expected


def test_html_under_txt_name_parses_as_html():
    doc = one("python/library/json.html", as_key="notes/page.txt")
    assert doc.format == "html" and "| JSON | Python |" in doc.text


def test_binary_and_empty_are_parse_errors():
    png = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256))
    with pytest.raises(ParseError, match="binary content: PNG image"):
        parse_object(RawObject.from_bytes("file:///x/img.txt", "img.txt", png))
    with pytest.raises(ParseError, match="no text extracted"):
        parse_object(RawObject.from_bytes("file:///x/empty.txt", "empty.txt", b" \n\n"))
    with pytest.raises(ParseError, match="no text extracted"):
        parse_object(RawObject.from_bytes("file:///x/e.html", "e.html",
                                          b"<html><body><nav>menu</nav><script>x</script></body></html>"))


def test_latin1_text_falls_back():
    doc = parse_object(RawObject.from_bytes("file:///x/l.txt", "l.txt", "café crème\n".encode("latin-1")))[0]
    assert doc.text == "café crème"


def test_questions_point_at_corpus_files():
    lines = (CORPUS.parent / "questions.jsonl").read_text().splitlines()
    qs = [json.loads(x) for x in lines]
    assert len(qs) >= 12 and any(q.get("acl") == ["staff"] for q in qs)
    for q in qs:
        assert (CORPUS / q["expected_key"]).is_file(), q
