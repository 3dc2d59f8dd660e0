"""What the index side meets in its input: deep or unclosed HTML is read to its end, hidden names
are counted (or indexed), what one document may inflate to is capped, sizes are checked before
parsing and records emitted as they are parsed, links out of the root are followed only when
allowed, and an index inside its input is refused."""
from __future__ import annotations

import codecs
import json
import tracemalloc
import zlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from tests.pdf_maker import serialize
from tests.unit.test_text_decoding import _raw
from transforms.ingest.parse import ParseError, parse_object, parse_object_with_errors
from transforms.ingest.parse import ParseFn
from transforms.ingest.parse.limits import ParseLimits
from transforms.records import RawObject
from transforms.records import UniqueObject


def _peak(fn) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _jsonl_unique(lines: int, bad_first: int = 0) -> UniqueObject:
    body = "".join("{broken\n" for _ in range(bad_first))
    body += "".join(json.dumps({"id": f"r{i}", "text": f"record {i} text"}) + "\n" for i in range(lines))
    raw = _raw("many.jsonl", body.encode())
    return UniqueObject(raw=raw, source_uris=(raw.uri,))


def _emitted(fn: ParseFn, unique: UniqueObject):
    import apache_beam as beam
    docs, dead = [], []
    for item in fn.process(unique):
        if isinstance(item, beam.pvalue.TaggedOutput):
            dead.append(item.value.reason)
        else:
            docs.append(item.doc_id)
    return docs, dead


def raw(key: str, data: bytes) -> RawObject:
    return RawObject.from_bytes(f"file:///corpus/{key}", key, data, mtime=1700000000.0)


def text_of(docs) -> str:
    return "\n".join(s.text for d in docs for s in d.sections)


def unclosed_rows(n: int = 400) -> bytes:
    """Legacy HTML: every row opens <p><font> and closes neither (libxml2 nests them)."""
    rows = "".join(f"<p><font>row {i} of the legacy table\n" for i in range(n))
    return f"<html><head><title>Legacy</title></head><body>{rows}</body></html>".encode()


def nested_divs(n: int) -> bytes:
    return ("<html><body><p>before the nest</p>" + "<div>" * n + "the deep text" + "</div>" * n
            + "<p>the text after the nest</p></body></html>").encode()


def flate_pdf(inflated_mib: int, level: int = 6) -> bytes:
    """A one-page PDF whose content stream is a little text and then inflated_mib MiB of spaces,
    Flate-compressed (about 1 KB on disk per MiB inflated)."""
    z = zlib.compressobj(level)
    parts = [z.compress(b"BT /F1 11 Tf 56 778 Td (a bombed page) Tj ET\n")]
    blank = b" " * (1 << 20)
    parts += [z.compress(blank) for _ in range(inflated_mib)]
    stream = b"".join(parts) + z.flush()
    objs = [b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [4 0 R] /Count 1 >>",
            b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 595 842] /Contents 5 0 R "
            b"/Resources << /Font << /F1 3 0 R >> >> >>",
            b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(stream) + stream + b"\nendstream"]
    return serialize(objs, 1)


# --- HTML is read to its end ------------------------------------------------------------------

def test_unclosed_legacy_rows_are_parsed_to_the_last_row():
    text = text_of(parse_object(raw("legacy.html", unclosed_rows(400))))
    assert "row 126 of the legacy table" in text  # what was indexed before
    assert "row 300 of the legacy table" in text and "row 399 of the legacy table" in text
    assert "row 300 of the legacy table\nrow 301" in text  # rows stay lines, not one run of words


@pytest.mark.parametrize("depth", [300, 3000, 100_000])
def test_deeply_nested_divs_keep_the_deep_text_and_what_follows(depth):
    text = text_of(parse_object(raw("deep.html", nested_divs(depth))))
    assert "before the nest" in text and "the deep text" in text and "the text after the nest" in text


def test_a_text_run_over_10_mb_is_read_to_its_end():
    page = "<html><body><p>" + "word " * 2_200_000 + "the end of the run</p><p>the text after</p></body></html>"
    text = text_of(parse_object(raw("long.html", page.encode())))
    assert "the end of the run" in text and "the text after" in text


PROPERTY = settings(max_examples=40, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@PROPERTY
@given(cycle=st.lists(st.sampled_from(["div", "p", "font", "span", "b", "section", "li", "td"]),
                      min_size=1, max_size=6), depth=st.integers(0, 5000))
def test_any_nesting_keeps_the_deep_text_and_what_follows(cycle, depth):
    tags = [cycle[i % len(cycle)] for i in range(depth)]
    page = ("<html><body>" + "".join(f"<{t}>" for t in tags) + "the deep text"
            + "".join(f"</{t}>" for t in reversed(tags)) + "<p>the text after</p></body></html>")
    text = text_of(parse_object(raw("p.html", page.encode())))
    assert "the deep text" in text and "the text after" in text


# --- hidden names: counted with their paths, or indexed ---------------------------------------

HIDDEN_FILES = {"good.md": b"# Good\n\nA visible page about pumps.\n",
                "..notes.txt": b"notes that start with two dots\n",
                ".github/README.txt": b"a readme in a hidden folder\n",
                ".github/deeper/x.txt": b"deeper in the hidden folder\n",
                "sub/.DS_Store": b"\x00\x01\x02"}
HIDDEN = ["..notes.txt", ".github/", "sub/.DS_Store"]


def make_tree(root: Path, files: dict) -> Path:
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return root


def test_hidden_local_names_are_counted_with_their_paths_or_listed(tmp_path):
    from transforms.ingest.read import list_objects
    root = make_tree(tmp_path / "src", HIDDEN_FILES)
    report: dict = {}
    assert [o.key for o in list_objects(str(root), report=report)] == ["good.md"]
    assert sorted(report["hidden"]) == sorted(str(root / h).rstrip("/") + ("/" if h.endswith("/") else "")
                                              for h in HIDDEN)
    report = {}
    keys = [o.key for o in list_objects(str(root), report=report, skip_hidden=False)]
    assert keys == sorted(HIDDEN_FILES) and report == {}


@PROPERTY
@given(name=st.text(st.sampled_from(".a-_ é"), min_size=1, max_size=8).filter(
    lambda n: n not in (".", "..")), folder=st.sampled_from(["", ".hid/", "sub/", "..x/"]))
def test_any_name_with_leading_dots_is_listed_or_counted(tmp_path_factory, name, folder):
    from transforms.ingest.read import list_objects
    root = make_tree(tmp_path_factory.mktemp("dots"), {folder + name: b"x"})
    report: dict = {}
    listed = list_objects(str(root), report=report)
    assert len(listed) + sum(len(v) for v in report.values()) == 1
    assert len(list_objects(str(root), skip_hidden=False)) == 1


# --- what one document may inflate to ---------------------------------------------------------

def test_a_pdf_stream_past_max_inflated_bytes_is_refused_with_the_reason():
    with pytest.raises(ParseError, match=r"parse\.max_inflated_bytes=8388608"):
        parse_object_with_errors(raw("bomb.pdf", flate_pdf(16)), limits=ParseLimits(max_inflated_bytes=8 << 20))
    docs, _ = parse_object_with_errors(raw("ok.pdf", flate_pdf(1)), limits=ParseLimits(max_inflated_bytes=8 << 20))
    assert "a bombed page" in text_of(docs)  # under the cap: parsed as before


def test_a_stream_the_scan_cannot_see_is_held_to_the_cap_by_pypdf():
    import binascii
    import re
    pdf = flate_pdf(16)
    a, b = pdf.index(b"stream\n") + 7, pdf.index(b"\nendstream")
    hexed = binascii.hexlify(pdf[a:b]) + b">"  # ASCIIHex over Flate: not zlib bytes in the file
    head = pdf[:a].replace(b"/Filter /FlateDecode", b"/Filter [/ASCIIHexDecode /FlateDecode]")
    pdf = re.sub(rb"/Length \d+", b"/Length %d" % len(hexed), head) + hexed + pdf[b:]
    with pytest.raises(ParseError, match=r"PDF stream inflates to more than parse\.max_inflated_bytes=8388608"):
        parse_object_with_errors(raw("hex.pdf", pdf), limits=ParseLimits(max_inflated_bytes=8 << 20))


def test_text_past_max_text_chars_is_refused_in_every_format():
    limits = ParseLimits(max_text_chars=1000)
    big, small = "word " * 400, "a short record"
    jsonl = (f'{{"id": "small", "text": "{small}"}}\n{{"id": "big", "text": "{big}"}}\n').encode()
    docs, errors = parse_object_with_errors(raw("r.jsonl", jsonl), limits=limits)
    assert [d.metadata["record_id"] for d in docs] == ["small"]
    assert errors == ["line 2: text longer than parse.max_text_chars=1000"]
    for key, data in (("t.txt", big.encode()), ("p.html", f"<html><body><p>{big}</p></body></html>".encode()),
                      ("m.md", f"# T\n\n{big}\n".encode())):
        with pytest.raises(ParseError, match=r"text longer than parse\.max_text_chars=1000"):
            parse_object_with_errors(raw(key, data), limits=limits)
    from tests.pdf_maker import text_pdf
    pdf = text_pdf([["line %d of a long page of text" % i for i in range(50)]])
    with pytest.raises(ParseError, match=r"text longer than parse\.max_text_chars=1000"):
        parse_object_with_errors(raw("long.pdf", pdf), limits=limits)


# --- sizes checked before parsing, records emitted as they are parsed -----------------------------

@pytest.mark.parametrize("key,make", [
    ("big.txt", lambda n: b"word " * (n // 5)),
    ("big.txt", lambda n: b"x" * n),  # one line
    ("big.md", lambda n: b"# T\n\n" + b"w" * n),
    ("big.1", lambda n: b".TH BIG 1\n.SH NAME\n" + b"w" * n),
    ("big.html", lambda n: b"<html><body><p>" + b"w " * (n // 2) + b"</p></body></html>"),
    ("big.txt", lambda n: codecs.BOM_UTF16_LE + ("w" * (n // 2)).encode("utf-16-le")),
    ("big.txt", lambda n: ("é" * (n // 2)).encode("utf-8")),
])
def test_a_file_far_past_max_text_chars_is_refused_before_parsing_in_bounded_memory(key, make):
    limit = 100_000
    data = make(40 * limit)  # 4 MB: 40x the cap (10x the most HTML may hold)
    raw = _raw(key, data)
    errors = []

    def parse():
        try:
            parse_object_with_errors(raw, limits=ParseLimits(max_text_chars=limit))
        except ParseError as e:
            errors.append(str(e))
    peak = _peak(parse)
    assert errors and "max_text_chars" in errors[0] and "before parsing" in errors[0]
    assert peak < 3 * 1024 * 1024, peak  # not a copy of the file: under 1x its size


def test_a_file_just_under_the_cap_is_still_parsed():
    limits = ParseLimits(max_text_chars=10_000)
    for key, data in (("ok.txt", "é" * 9_000), ("ok.html", "<p>" + "w " * 4_000 + "</p>" + "<b></b>" * 4_000)):
        docs, _ = parse_object_with_errors(_raw(key, data.encode()), limits=limits)
        assert docs


def test_the_streamed_parse_stage_emits_what_the_whole_file_parse_does():
    from transforms.common.stage import Outputs
    for unique in (_jsonl_unique(50, bad_first=3), _jsonl_unique(0, bad_first=4), _jsonl_unique(5)):
        out = Outputs("parse", ParseFn().origin(unique))
        try:
            ParseFn().apply(unique, out)
            want = ([d.doc_id for d in out.main], [d.reason for d in out.of("dead_letter")])
        except ParseError as e:
            want = ([], [str(e)])
        assert _emitted(ParseFn(), unique) == want


# --- links out of the root, an index inside its input ------------------------------------------

def test_links_out_of_the_root_can_be_allowed(hostile_corpus):
    from transforms.ingest.read import list_objects
    report: dict = {}
    keys = {o.key for o in list_objects(str(hostile_corpus), report=report, follow_outside=True)}
    assert "docs/passwd-link.txt" in keys and "symlink_outside_root" not in report


def test_an_index_inside_its_input_is_refused(tmp_path, test_config):
    from pipelines.index import IndexPathError, run_index
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.md").write_text("# A\n\ntext\n")
    with pytest.raises(IndexPathError, match="inside --input"):
        run_index(test_config, str(corpus), str(corpus / "index"), progress=False, log=lambda *_: None)
    assert not (corpus / "index").exists()
