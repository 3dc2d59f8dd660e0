"""bench/scale_index_job.py: the pure parts of the scale bench's index-job nightly (bytes-written
accounting, the 1% pick, the source records, the pre-filled embedding cache the job must hit)."""
import hashlib
import json
import os

import numpy as np
import pytest

from bench.scale_index_job import (CachePrefill, bytes_by_area, bytes_written, file_key, jsonl_record, pick_changed_files,
                                   record_id, snapshot, vector_rows)


def _write(path, data: bytes):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def test_bytes_written_counts_new_and_changed_files_only(tmp_path):
    root = str(tmp_path / "idx")
    _write(os.path.join(root, "keep.bin"), b"a" * 10)
    _write(os.path.join(root, "change.bin"), b"b" * 20)
    _write(os.path.join(root, "gone.bin"), b"c" * 30)
    _write(os.path.join(root, "cache", "pre.parquet"), b"d" * 40)
    before = snapshot(root)
    assert before["keep.bin"][0] == 10 and set(before) == {"keep.bin", "change.bin", "gone.bin",
                                                           os.path.join("cache", "pre.parquet")}
    _write(os.path.join(root, "change.bin"), b"B" * 25)
    os.remove(os.path.join(root, "gone.bin"))
    _write(os.path.join(root, "versions", "v1", "new.bin"), b"e" * 7)
    _write(os.path.join(root, "cache", "added.parquet"), b"f" * 3)
    got = bytes_written(before, snapshot(root))
    assert got == {"bytes": 25 + 7 + 3, "new_files": 2, "changed_files": 1, "removed_files": 1}
    # excluded paths (a file, or a folder ending in /) are not counted
    got = bytes_written(before, snapshot(root), exclude=[os.path.join("cache", "")])
    assert got["bytes"] == 25 + 7 and got["new_files"] == 1


def test_bytes_written_sees_a_rewrite_of_the_same_size(tmp_path):
    root = str(tmp_path / "idx")
    p = os.path.join(root, "f.bin")
    _write(p, b"x" * 5)
    before = snapshot(root)
    os.remove(p)
    _write(p, b"y" * 5)  # a new file (inode or mtime differs): written again
    os.utime(p, ns=(before["f.bin"][1] + 10**9, before["f.bin"][1] + 10**9))
    assert bytes_written(before, snapshot(root))["bytes"] == 5
    assert bytes_written(snapshot(root), snapshot(root))["bytes"] == 0
    assert snapshot(str(tmp_path / "missing")) == {}


def test_pick_changed_files_reaches_the_fraction_deterministically():
    per_file = [200] * 99 + [37]
    total = sum(per_file)
    picked = pick_changed_files(per_file, 0.01, seed=0)
    assert picked == sorted(picked) and len(set(picked)) == len(picked)
    got = sum(per_file[i] for i in picked)
    assert 0.01 * total <= got < 0.01 * total + 200
    assert picked == pick_changed_files(per_file, 0.01, seed=0)
    assert pick_changed_files(per_file, 0.01, seed=1) != picked or len(picked) == len(per_file)
    assert len(pick_changed_files([5, 5], 0.001)) == 1  # at least one file
    assert pick_changed_files([], 0.01) == [] and pick_changed_files([3], 0.0) == []
    assert sum(per_file[i] for i in pick_changed_files(per_file, 0.5, seed=3)) >= total / 2


def test_vector_rows_in_proportion():
    assert vector_rows(3, 3) == [0, 1, 2]
    assert vector_rows(4, 2) == [0, 0, 1, 1]
    assert vector_rows(2, 5) == [0, 2]
    assert vector_rows(2, 0) == [0, 0]
    assert file_key(1234).endswith("docs-0001234.jsonl") and file_key(1234).startswith("00002/")


class _C:
    def __init__(self, text, title, emb, sv):
        self.text, self.title, self.embedding, self.sentence_vectors = text, title, emb, sv


class _D:
    def __init__(self, number, chunks):
        self.number, self.chunks = number, chunks


def _doc(number, dim, rng, n_chunks=3):
    from transforms.ingest.sentvec import quantize_int8
    chunks = []
    for j in range(n_chunks):
        text = " ".join(f"Document {number} part {j} sentence {k} about topic {number * 7 + k}." for k in range(30))
        emb = rng.standard_normal(dim).astype(np.float32)
        emb /= np.linalg.norm(emb)
        sv = quantize_int8(rng.standard_normal((4, dim)).astype(np.float32)) if j % 2 == 0 else None
        chunks.append(_C(text, f"Title {number}", emb, sv))
    return _D(number, chunks)


def test_records_parse_as_the_job_parses_them():
    from transforms.ingest.parse import parse_object
    from transforms.records import RawObject
    rng = np.random.default_rng(0)
    docs = [_doc(d, 8, rng) for d in range(3)]
    data = "".join(jsonl_record(d.number, d.chunks) for d in docs).encode("utf-8")
    parsed = parse_object(RawObject.from_bytes("/src/a.jsonl", "a.jsonl", data))
    assert [p.metadata["record_id"] for p in parsed] == [record_id(d) for d in range(3)]
    assert parsed[0].title == "Title 0"
    assert json.loads(jsonl_record(5, []))["id"] == record_id(5)  # never an empty record


def test_the_prefilled_cache_is_what_the_embed_stage_hits(tmp_path):
    """Every chunk the job's parse/chunk/contextualize make of the files is a cache hit with the
    right sentence spans: embed_chunks computes nothing (it would need the model)."""
    from configs.schema import load_config
    from transforms.ingest.chunk import chunk_document
    from transforms.ingest.contextualize import contextualize
    from transforms.ingest.embed import embed_chunks
    from transforms.ingest.embed_cache import EmbeddingCache
    from transforms.ingest.parse import parse_object
    from transforms.records import RawObject
    cfg = load_config()
    idx = str(tmp_path / "idx")
    pre = CachePrefill(cfg, idx, "t")
    dim = pre.spec.dim
    rng = np.random.default_rng(1)
    docs = [_doc(d, dim, rng, n_chunks=1 + d % 4) for d in range(6)]
    data = "".join(jsonl_record(d.number, d.chunks) for d in docs).encode("utf-8")
    n = pre.add_file("p/a.jsonl", "/src/p/a.jsonl", data, {record_id(d.number): d for d in docs})
    pre.flush()
    assert n == pre.chunks > 0 and pre.documents == 6 and len(pre.files) == 1
    assert os.path.dirname(pre.files[0]) == pre.cache_dir and pre.cache_dir.startswith(idx)
    cache = EmbeddingCache.load(pre.cache_dir, dim)
    assert len(cache) == n
    raw = RawObject(uri="/elsewhere/a.jsonl", key="p/a.jsonl", data=data, size=len(data), mtime=1.0,
                    content_hash=hashlib.sha256(data).hexdigest())
    seen = 0
    for doc in parse_object(raw):
        chunks = contextualize(chunk_document(doc, pre.tokenizer, pre.settings), pre.contextualizer,
                               pre.tokenizer, pre.settings.context_tokens)
        vectors, sentences, new = embed_chunks(chunks, None, cache)
        assert new == [] and all(v is not None for v in vectors)
        assert all(abs(float(np.linalg.norm(v)) - 1.0) < 1e-5 for v in vectors)
        seen += len(chunks)
    assert seen == n


def test_prefill_refuses_the_llm_contextualizer(tmp_path):
    from configs.schema import load_config
    cfg = load_config()
    cfg = cfg.model_copy(update={"contextualize": cfg.contextualize.model_copy(update={"kind": "llm"})})
    with pytest.raises(ValueError):
        CachePrefill(cfg, str(tmp_path), "t")


def test_bytes_by_area_attributes_what_a_run_wrote():
    before = {"shards/chunks/a.parquet": (10, 1, 1), "segments/s1/rows.arrow": (5, 1, 2)}
    after = {**before, "shards/chunks/b.parquet": (7, 2, 3), "shards/chunks/b.keys.parquet": (2, 2, 4),
             "shards/signatures/c.parquet": (3, 2, 5), "versions/v2/sources/sources.parquet": (4, 2, 6),
             "versions/v2/manifest.json": (1, 2, 7), "segments/s2/rows.arrow": (9, 2, 8), "CURRENT": (1, 2, 9)}
    assert bytes_by_area(before, after) == {
        "segments": 9, "shards/chunks": 7, "versions/sources": 4, "shards/signatures": 3,
        "shards/chunks (summaries)": 2, "versions/manifest.json": 1, "CURRENT": 1}
