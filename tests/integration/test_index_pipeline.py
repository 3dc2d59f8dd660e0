"""The index job end to end on Beam's local runner: local folder and a real S3 server."""
import json
import os

import pytest

from pipelines.index import run_index
from transforms.index import publish
from transforms.index.shards import read_table

# Columns that legitimately differ between two runs or two locations of the same bytes.
RUN_COLUMNS = {"indexed_at", "source_uri", "source_uris"}


def version(index_dir):
    return publish.resolve_index(str(index_dir))


def rows(index_dir, table="chunks", drop=RUN_COLUMNS):
    t = read_table(version(index_dir), table)
    t = t.select([c for c in t.column_names if c not in drop])
    key = "chunk_id" if table == "chunks" else "doc_id"
    return t.sort_by(key).to_pylist()


def test_every_input_is_accounted_for(mini_index):
    _, s = mini_index
    assert s["balanced"], s
    assert s["listed"] == s["read"] == 9
    assert s["duplicates"] == 1  # json.html under mirror/
    assert s["dead_lettered"] == 1  # the truncated PDF
    assert s["parsed"] == 7
    assert s["chunks"] == s["embedded"] > 0


def test_shards_documents_and_dead_letters(mini_index):
    index_dir, s = mini_index
    vdir = version(index_dir)
    chunks = read_table(vdir, "chunks")
    assert chunks.num_rows == s["chunks"]
    assert len(set(chunks.column("chunk_id").to_pylist())) == chunks.num_rows
    emb = chunks.column("embedding")
    assert emb.type.list_size == 384
    assert set(chunks.column("model_id").to_pylist()) == {"all-MiniLM-L6-v2-onnx-int8"}
    # The model's own tokenizer over exactly what is embedded (context + text) with [CLS]/[SEP]:
    # nothing the model sees is ever cut at its 256-token limit, and n_tokens says so honestly.
    from transforms.common.text import embedding_text
    from transforms.model.tokens import load_tokenizer
    tok = load_tokenizer()
    texts = [embedding_text(c, t) for c, t in zip(chunks.column("context").to_pylist(),
                                                  chunks.column("text").to_pylist())]
    real = [len(e.ids) for e in tok.encode_batch(texts, add_special_tokens=True)]
    assert max(real) <= 256, max(real)
    assert max(real) > 200  # the budget is exercised: long documents fill chunks close to the limit
    stored = chunks.column("n_tokens").to_pylist()
    assert all(n >= r for n, r in zip(stored, real)), [(n, r) for n, r in zip(stored, real) if n < r][:5]

    docs = read_table(vdir, "documents").to_pylist()
    json_doc = [d for d in docs if d["key"] in ("python/library/json.html", "mirror/python/library/json.html")]
    assert len(json_doc) == 1, "identical bytes are one document"
    assert len(json_doc[0]["source_uris"]) == 2, "every path stays findable"
    records = [d for d in docs if d["format"] == "jsonl"]
    assert records and all(d["doc_id"] for d in records)

    dead = read_table(vdir, "dead_letters").to_pylist()
    pdf = [d for d in dead if d["source_uri"].endswith("truncated.pdf")]
    assert pdf and pdf[0]["stage"] == "parse" and pdf[0]["reason"]


def test_version_is_published_with_manifest_and_artifact(mini_index):
    index_dir, s = mini_index
    vdir = version(index_dir)
    assert os.path.basename(vdir) == s["version"]
    manifest = json.load(open(os.path.join(vdir, "manifest.json")))
    assert manifest["model"]["sha256"] and manifest["counts"]["chunks"] == s["chunks"]
    (seg,) = manifest["segments"]  # the mini corpus is one segment
    assert seg["live"] == s["chunks"] and manifest["bm25"]["num_docs"] == s["chunks"]
    assert os.path.exists(os.path.join(index_dir, "segments", seg["id"], "segment.json"))
    assert json.load(open(os.path.join(vdir, "summary.json")))["chunks"] == s["chunks"]
    assert not os.listdir(os.path.join(index_dir, "staging"))


def test_rerun_reproduces_the_same_ids_and_vectors(mini_index, mini_corpus, test_config, tmp_path):
    index_dir, _ = mini_index
    again = tmp_path / "again"
    run_index(test_config, str(mini_corpus), str(again), progress=False, log=lambda *_: None)
    assert rows(again) == rows(index_dir)
    assert rows(again, "documents", drop={"source_uri", "source_uris"}) == \
        rows(index_dir, "documents", drop={"source_uri", "source_uris"})


def test_s3_input_gives_the_same_rows_as_the_local_folder(mini_index, mini_corpus, test_config, s3_server, tmp_path):
    s3_server.upload_dir(mini_corpus, "docs", "corpus")
    cfg = test_config.model_copy(update={"s3": test_config.s3.model_copy(update={
        "endpoint_url": s3_server.endpoint_url, "region": s3_server.region,
        "access_key_id": s3_server.access_key, "secret_access_key": s3_server.secret_key})})
    out = tmp_path / "s3index"
    summary = run_index(cfg, "s3://docs/corpus", str(out), progress=False, log=lambda *_: None)
    assert summary["balanced"] and summary["read"] == 9
    index_dir, _ = mini_index
    assert rows(out) == rows(index_dir)
    uris = read_table(version(out), "chunks").column("source_uri").to_pylist()
    assert all(u.startswith("s3://docs/corpus/") for u in uris)


def test_a_failed_run_leaves_the_live_version_untouched(mini_index, mini_corpus, test_config, tmp_path):
    """A real kill (SIGKILL) in the middle of the Beam pipeline, while new chunks are being
    embedded and shards written: the live version, CURRENT and versions/ stay as they were,
    and the next run publishes."""
    import shutil
    import subprocess
    import sys

    from tests.conftest import copy_corpus

    index_dir = tmp_path / "index"
    shutil.copytree(mini_index[0], index_dir)  # a copy: the session index stays as other tests expect
    src = copy_corpus(tmp_path / "src")
    (src / "tonight.md").write_text("# Added tonight\n\nThe lighthouse keeper logs the weather at dawn.\n")
    live = publish.current_version(str(index_dir))
    current_bytes = (index_dir / "CURRENT").read_bytes()
    versions_before = sorted(os.listdir(index_dir / "versions"))
    live_files = {p.relative_to(index_dir): p.read_bytes() for p in (index_dir / "versions" / live).rglob("*")
                  if p.is_file()}

    env = {**os.environ, "PYTHONPATH": os.getcwd(), "RAGBEAM_FAULT_KILL_AT": "during_embed"}
    run = subprocess.run([sys.executable, "-m", "pipelines.cli", "index", "--quiet", "--input", str(src),
                          "--output", str(index_dir)], capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == -9, (run.returncode, run.stderr[-2000:])  # killed, not failed
    # -9 at during_embed: listing and planning were done, a new version was being staged
    assert [p.name for p in (index_dir / "staging").iterdir()], "killed before a version was staged"
    assert (index_dir / "CURRENT").read_bytes() == current_bytes
    assert publish.current_version(str(index_dir)) == live
    assert sorted(os.listdir(index_dir / "versions")) == versions_before
    assert {p.relative_to(index_dir): p.read_bytes() for p in (index_dir / "versions" / live).rglob("*")
            if p.is_file()} == live_files

    s = run_index(test_config, str(src), str(index_dir), progress=False, log=lambda *_: None)
    assert s["balanced"] and s["previous_version"] == live and s["added"] >= 1
    assert publish.current_version(str(index_dir)) == s["version"] != live
    docs = read_table(version(index_dir), "documents").to_pylist()
    assert any(d["key"] == "tonight.md" for d in docs)
    assert not os.listdir(index_dir / "staging")


def test_a_record_repeated_in_two_files_is_one_document(test_config, tmp_path):
    import json as _json
    shared = _json.dumps({"id": "r-shared", "title": "Shared", "text": "The same record in two exports."})
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.jsonl").write_text(shared + "\n" + _json.dumps({"id": "a1", "text": "Only in a."}) + "\n")
    (tmp_path / "src" / "b.jsonl").write_text(_json.dumps({"id": "b1", "text": "Only in b."}) + "\n" + shared + "\n")
    s = run_index(test_config, str(tmp_path / "src"), str(tmp_path / "idx"), progress=False, log=lambda *_: None)
    assert s["balanced"] and s["documents"] == 3 and s["duplicate_documents"] == 1
    from transforms.records import record_id_of
    docs = {record_id_of(d["doc_id"]): d for d in read_table(version(tmp_path / "idx"), "documents").to_pylist()}
    assert sorted(docs) == ["a1", "b1", "r-shared"]
    assert [u.rsplit("/", 1)[-1] for u in docs["r-shared"]["source_uris"]] == ["a.jsonl", "b.jsonl"]


def test_a_source_with_nothing_indexable_is_a_clear_error(test_config, tmp_path):
    from pipelines.index import NoChunksError
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "image.bin").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    with pytest.raises(NoChunksError, match="1 dead-lettered"):
        run_index(test_config, str(tmp_path / "src"), str(tmp_path / "idx"), progress=False, log=lambda *_: None)
    assert publish.current_version(str(tmp_path / "idx")) is None
