"""`ragbeam sql`: a published version's tables as DuckDB views (counts equal to the manifest's,
the planted bad file in dead_letters), the catalog file any DuckDB client opens, one clear line
for what cannot be read, and a version on object storage."""
import csv
import io
import json
import os
import shutil

import duckdb
import pytest

from pipelines.cli import main
from transforms.index import publish


def _manifest(index_dir) -> dict:
    with open(os.path.join(publish.resolve_index(str(index_dir)), "manifest.json"), encoding="utf-8") as f:
        return json.load(f)


def _json_rows(capsys, argv) -> list[dict]:
    assert main(["sql"] + argv + ["--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


COUNTS = """SELECT (SELECT count(*) FROM chunks) AS chunks, (SELECT count(*) FROM documents) AS documents,
                   (SELECT count(*) FROM dead_letters) AS dead_letters, (SELECT version FROM manifest) AS version"""


def test_views_count_what_the_manifest_counts_and_show_the_dead_letter(mini_index, capsys):
    index, summary = mini_index
    m = _manifest(index)
    got, = _json_rows(capsys, ["--index", str(index), "--query", COUNTS])
    assert got == {"chunks": m["counts"]["chunks"], "documents": m["counts"]["documents"],
                   "dead_letters": m["counts"]["dead_lettered"], "version": m["version"]}
    assert got["chunks"] == sum(s["live"] for s in m["segments"]) == summary["chunks"] > 0
    dead = _json_rows(capsys, ["--index", str(index), "--query",
                               "SELECT source_uri, stage, reason FROM dead_letters"])
    assert len(dead) == 1 and dead[0]["source_uri"].endswith("broken/truncated.pdf")
    assert dead[0]["stage"] == "parse" and "PDF" in dead[0]["reason"]
    # csv: a header, then the rows
    assert main(["sql", "--index", str(index), "--format", "csv", "--query",
                 "SELECT format, count(*) AS n FROM documents GROUP BY format ORDER BY format"]) == 0
    rows = list(csv.reader(io.StringIO(capsys.readouterr().out)))
    assert rows[0] == ["format", "n"] and sum(int(r[1]) for r in rows[1:]) == m["counts"]["documents"]
    # the default table: a header, a rule, the rows and their number
    assert main(["sql", "--index", str(index), "--query", "SELECT stage FROM dead_letters"]) == 0
    assert capsys.readouterr().out.splitlines() == ["stage", "-----", "parse", "(1 row)"]


def test_without_a_query_it_lists_the_views_and_their_columns(mini_index, capsys):
    index, _ = mini_index
    assert main(["sql", "--index", str(index)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"version {_manifest(index)['version']} (")
    for view in ("chunks", "documents", "dead_letters", "near_duplicates", "sources", "manifest"):
        assert f"\n{view} (" in out, view
    assert "chunk_id VARCHAR" in out and "reason VARCHAR" in out


def test_the_catalog_file_opens_in_any_duckdb_client(mini_index, tmp_path, capsys):
    index, _ = mini_index
    m = _manifest(index)
    cat = tmp_path / "index.duckdb"
    assert main(["sql", "--index", str(index), "--write-catalog", str(cat)]) == 0
    assert f"over version {m['version']}" in capsys.readouterr().out
    con = duckdb.connect(str(cat), read_only=True)  # plain DuckDB, nothing of ragbeam loaded
    try:
        assert con.execute("SELECT count(*) FROM chunks").fetchone()[0] == m["counts"]["chunks"]
        assert con.execute("SELECT count(*) FROM dead_letters").fetchone()[0] == 1
        assert con.execute("SELECT version, manifest->>'$.counts.documents' FROM manifest").fetchone() == \
            (m["version"], str(m["counts"]["documents"]))
    finally:
        con.close()
    assert not os.path.exists(str(cat) + ".tmp")


def test_an_older_version_by_name_and_what_cannot_be_read_in_one_line(mini_index, test_config, tmp_path, capsys):
    idx = tmp_path / "idx"
    shutil.copytree(mini_index[0], idx)
    old = publish.current_version(str(idx))
    from pipelines.segments import rebuild_segments
    new = rebuild_segments(test_config, str(idx))["version"]  # a second published version
    assert publish.current_version(str(idx)) == new != old
    for argv, version in (([], new), (["--version", old], old)):
        got, = _json_rows(capsys, ["--index", str(idx), "--query", "SELECT version FROM manifest"] + argv)
        assert got["version"] == version

    for argv, message in (
            (["--version", "20990101T000000Z-abcdef"], "no published version '20990101T000000Z-abcdef'"),
            (["--query", "SELECT nope FROM chunks"], "query failed: Binder Error"),
            (["--query", "SELECT 1", "--frobnicate"], "unrecognized arguments for 'ragbeam sql': --frobnicate")):
        assert main(["sql", "--index", str(idx)] + argv) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: ") and message in err[0], err
    assert main(["sql", "--index", str(tmp_path / "nothing")]) == 2
    assert "not an index" in capsys.readouterr().err
    staged = idx / publish.STAGING / old  # a run's work in progress is no version to read
    shutil.copytree(idx / publish.VERSIONS / old, staged)
    assert main(["sql", "--index", str(staged)]) == 2
    assert "a staging dir is not a published version" in capsys.readouterr().err


def test_a_version_on_object_storage(mini_index, s3_config_env, tmp_path, capsys):
    saved = dict(os.environ)  # the command exports the S3 settings for workers, as the others do
    try:
        s3_config_env.upload_dir(mini_index[0], "sqlbucket", "idx")
        m = _manifest(mini_index[0])
        got, = _json_rows(capsys, ["--index", "s3://sqlbucket/idx", "--query", COUNTS])
        assert (got["chunks"], got["dead_letters"], got["version"]) == (m["counts"]["chunks"], 1, m["version"])
        cat = tmp_path / "s3.duckdb"
        assert main(["sql", "--index", "s3://sqlbucket/idx", "--write-catalog", str(cat)]) == 0
        capsys.readouterr()
        con = duckdb.connect(str(cat), read_only=True)  # its tables were copied beside it
        try:
            assert con.execute("SELECT count(*) FROM documents").fetchone()[0] == m["counts"]["documents"]
        finally:
            con.close()
    finally:
        os.environ.clear()
        os.environ.update(saved)


def test_after_a_nightly_the_views_hold_exactly_the_live_rows(tmp_path, test_config, capsys):
    """A nightly lists the shared shards again and records the rows that left as deletions: the
    views leave those rows out (the removed and changed documents' old rows are not there), the
    version before still shows them, and a version keeping its shards in its own folder (written
    before the shared store) is read from there."""
    from pipelines.index import run_index
    from tests.conftest import copy_corpus
    from transforms.index import shard_store
    from transforms.index.shards import read_table
    src = copy_corpus(tmp_path / "src")  # enough rows that the nightly records deletions, not compactions
    idx = tmp_path / "idx"
    quiet = lambda *_: None  # noqa: E731
    old = run_index(test_config, str(src), str(idx), progress=False, log=quiet)["version"]
    changed = src / "nodejs/api/punycode.md"
    changed.write_text(changed.read_text() + "\n\n## Added tonight\n\nA new paragraph about tonight.\n")
    (src / "git/git-version.txt").unlink()
    run_index(test_config, str(src), str(idx), progress=False, log=quiet)
    m, vdir = _manifest(idx), publish.resolve_index(str(idx))
    assert m["tables"]["chunks"]["deletions"] and m["tables"]["documents"]["deletions"]
    live = read_table(vdir, "chunks", ["chunk_id"]).column(0).to_pylist()
    got, = _json_rows(capsys, ["--index", str(idx), "--query", COUNTS])
    assert got["chunks"] == len(live) == sum(s["live"] for s in m["segments"])
    assert got["documents"] == read_table(vdir, "documents").num_rows
    ids = _json_rows(capsys, ["--index", str(idx), "--query", "SELECT chunk_id FROM chunks"])
    assert sorted(r["chunk_id"] for r in ids) == sorted(live)
    gone = """SELECT (SELECT count(*) FROM chunks WHERE source_uri LIKE '%git-version.txt') AS removed,
                     (SELECT count(*) FROM documents WHERE source_uri LIKE '%git-version.txt') AS removed_docs,
                     (SELECT count(*) FROM documents WHERE source_uri LIKE '%punycode.md') AS changed_docs"""
    assert _json_rows(capsys, ["--index", str(idx), "--query", gone]) == [
        {"removed": 0, "removed_docs": 0, "changed_docs": 1}]
    before, = _json_rows(capsys, ["--index", str(idx), "--version", old, "--query", gone])
    assert before["removed"] > 0 and before["removed_docs"] == 1 and before["changed_docs"] == 1
    cat = tmp_path / "idx.duckdb"  # the catalog file applies the deletions too
    assert main(["sql", "--index", str(idx), "--write-catalog", str(cat)]) == 0
    capsys.readouterr()
    con = duckdb.connect(str(cat), read_only=True)
    try:
        assert con.execute("SELECT count(*) FROM chunks").fetchone()[0] == len(live)
    finally:
        con.close()
    # the same version as written before the shared store: its shards in its own folder
    import pyarrow.parquet as pq
    for table in shard_store.SHARED_TABLES:
        live_rows = read_table(vdir, table)
        os.makedirs(os.path.join(vdir, table))
        pq.write_table(live_rows, os.path.join(vdir, table, "part-00000-of-00001.parquet"))
    shutil.rmtree(os.path.join(vdir, shard_store.DELETIONS_DIR))
    del m["tables"]
    with open(os.path.join(vdir, "manifest.json"), "w", encoding="utf-8") as f:
        json.dump(m, f)
    shutil.rmtree(idx / "shards")
    again, = _json_rows(capsys, ["--index", str(idx), "--query", COUNTS])
    assert again == got
