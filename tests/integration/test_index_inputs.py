"""What the index job meets in its input, end to end: hidden names on S3, a PDF bomb refused in
bounded memory (in a process of its own, to measure its peak), hostile names and links, and
deep HTML, hidden names and a bomb through the index job; and a JSONL file parsed as a stream, a
memory measurement too slow for the unit tier."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path


from tests.unit.test_index_inputs import (HIDDEN, HIDDEN_FILES, _jsonl_unique, _peak, flate_pdf, make_tree, nested_divs,
                                          unclosed_rows)
from transforms.index.shards import read_table
from transforms.ingest.parse import ParseFn

ROOT = Path(__file__).resolve().parents[2]


def test_hidden_s3_names_are_counted_with_their_paths_or_listed(s3_server, tmp_path):
    from transforms.ingest.read import list_objects
    root = make_tree(tmp_path / "src", HIDDEN_FILES)
    s3_server.upload_dir(root, "hidden20", "docs")
    report: dict = {}
    listed = list_objects("s3://hidden20/docs", s3_server.settings(), report=report)
    assert [o.key for o in listed] == ["good.md"]
    assert report["hidden"] == [f"s3://hidden20/docs/{h}" for h in sorted(HIDDEN)]
    report = {}
    listed = list_objects("s3://hidden20/docs", s3_server.settings(), report=report, skip_hidden=False)
    assert [o.key for o in listed] == sorted(HIDDEN_FILES) and report == {}


def test_a_pdf_bomb_is_refused_in_bounded_memory(tmp_path):
    """512 MiB inflated from ~0.5 MB: the old parser peaked near 1.4 GB; the cap (default 256
    MiB) now refuses it with the peak within 100 MB of what the process held before."""
    pdf = tmp_path / "bomb.pdf"
    pdf.write_bytes(flate_pdf(512, level=1))
    code = textwrap.dedent(f"""
        import sys
        from transforms.ingest.parse import ParseError, parse_object_with_errors
        import transforms.ingest.parse.pdf, pypdf
        from transforms.records import RawObject
        data = open({str(pdf)!r}, "rb").read()
        def hwm():
            return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM"))
        before = hwm()
        try:
            parse_object_with_errors(RawObject.from_bytes("file:///b.pdf", "b.pdf", data, mtime=0.0))
            print("PARSED")
        except ParseError as e:
            print("REFUSED", e)
        print("DELTA_KB", hwm() - before)
    """)
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         timeout=300).stdout
    assert "REFUSED PDF streams inflate to more than parse.max_inflated_bytes=268435456" in out, out
    delta_kb = int(out.split("DELTA_KB")[1])
    assert delta_kb < 100 * 1024, out


def test_the_index_job_indexes_deep_html_counts_hidden_names_and_dead_letters_a_bomb(test_config, tmp_path):
    from pipelines.index import run_index
    from transforms.index.publish import resolve_index
    root = make_tree(tmp_path / "src", {**HIDDEN_FILES, "legacy.html": unclosed_rows(400),
                                        "deep.html": nested_divs(100_000), "bomb.pdf": flate_pdf(16)})
    cfg = test_config.model_copy(update={"parse": test_config.parse.model_copy(
        update={"max_inflated_bytes": 8 << 20})})
    s = run_index(cfg, str(root), str(tmp_path / "index"), progress=False, log=lambda *_: None)
    assert s["balanced"] and s["listed"] == 4 and s["dead_lettered"] == 1
    assert s["skipped_at_listing"] == {"hidden": 3}
    assert len(s["skipped_at_listing_paths"]["hidden"]) == 3
    version = resolve_index(str(tmp_path / "index"))
    dead = read_table(version, "dead_letters").to_pylist()
    assert [(os.path.basename(d["source_uri"]), d["reason"]) for d in dead] == [
        ("bomb.pdf", "PDF streams inflate to more than parse.max_inflated_bytes=8388608")]
    chunks = " ".join(c["text"] for c in read_table(version, "chunks").to_pylist())
    assert "row 300 of the legacy table" in chunks and "row 399 of the legacy table" in chunks
    assert "the deep text" in chunks and "the text after the nest" in chunks


def test_hostile_names_and_links_never_sink_the_index_job(hostile_corpus, test_config, tmp_path):
    from pipelines.index import run_index
    from transforms.index.publish import resolve_index
    index_dir = tmp_path / "index"
    s = run_index(test_config, str(hostile_corpus), str(index_dir), progress=False, log=lambda *_: None)
    assert s["balanced"]
    assert s["listed"] == 2 and s["parsed"] == 1 and s["dead_lettered"] == 1  # good.md + the bad name
    version = resolve_index(str(index_dir))
    dead = read_table(version, "dead_letters").to_pylist()
    assert [(d["source_uri"].endswith("bad\\xffname.md"), d["reason"]) for d in dead] == \
        [(True, "file name is not valid UTF-8")]
    assert s["skipped_at_listing"] == {"symlink_outside_root": 2, "dangling_link": 1, "not_a_regular_file": 1}
    chunks = read_table(version, "chunks").to_pylist()
    assert not any("root:x:0:0" in c["text"] for c in chunks)  # /etc/passwd-like target not indexed


# --- a memory measurement (tracemalloc over 40,000 records): a JSONL file is parsed as a stream ---

def test_a_jsonl_file_of_many_records_is_emitted_as_it_is_parsed_not_held_whole():
    unique = _jsonl_unique(40_000)
    fn = ParseFn()

    def stream():
        for _ in fn.process(unique):
            pass
    peak = _peak(stream)
    held = _peak(lambda: fn.apply(unique, __import__("transforms.common.stage", fromlist=["Outputs"]).Outputs()))
    assert peak * 4 < held, (peak, held)  # the old stage held every Document until the file ended
