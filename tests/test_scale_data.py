"""bench/scale_data.py: synthetic versions from a handful of hand-made chunk rows (no model)."""
import datetime
import glob
import json
import os
import re
import sys

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from bench.scale_data import (CARRIED_FILE, peak_rss_mb, write_changed_version, write_synthetic_version)
from transforms.index.shards import read_table
from transforms.ingest.sentvec import quantize_int8
from transforms.records import DOCUMENT_SCHEMA, SOURCE_SCHEMA, chunk_schema

DIM = 8
N = 300  # 75 synthetic documents of 4 chunks


def _unit(v):
    v = np.asarray(v, np.float32)
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


@pytest.fixture(scope="module")
def src():
    rng = np.random.default_rng(7)
    rows = []
    for i in range(5):
        n_sent = i + 1
        text = " ".join(f"Sentence {j} of chunk {i}." for j in range(n_sent))
        starts = [text.index(f"Sentence {j} ") for j in range(n_sent)]
        ends = starts[1:] + [len(text)]
        rows.append({
            "chunk_id": f"{i:032x}", "doc_id": "d" * 32, "content_hash": "c" * 64, "ordinal": i,
            "source_uri": "/corpus/a.md", "source_uris": ["/corpus/a.md"], "title": f"Title {i}",
            "heading_path": ["Title", f"Section {i}"], "page": None, "text": text, "context": f"Title › Section {i}",
            "n_tokens": 10 + i, "embedding": _unit(rng.standard_normal(DIM)), "model_id": "m",
            "model_sha256": "0" * 64, "chunker_version": "1", "acl": [], "metadata": json.dumps({"format": "markdown"}),
            "indexed_at": datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc),
            "sentence_starts": None if i == 3 else starts, "sentence_ends": None if i == 3 else ends,
            "sentence_vectors": None if i == 3 else list(quantize_int8(_unit(rng.standard_normal((n_sent, DIM))))),
        })
    return pa.Table.from_pylist(rows, chunk_schema(DIM))


@pytest.fixture(scope="module")
def base(src, tmp_path_factory):
    d = str(tmp_path_factory.mktemp("scale") / "v300")
    stats = write_synthetic_version(src, d, N, seed=0, rows_per_file=128)
    return d, stats


def _parquet_roundtrip(schema):
    """What a Parquet file written with `schema` reads back as (timestamp[s] comes back as ms,
    as in the pipeline's own shards)."""
    sink = pa.BufferOutputStream()
    pq.write_table(schema.empty_table(), sink)
    return pq.read_schema(pa.BufferReader(sink.getvalue())).remove_metadata()


def test_synthetic_version_rows(src, base):
    d, stats = base
    files = sorted(glob.glob(os.path.join(d, "chunks", "*.parquet")))
    assert [os.path.basename(f) for f in files] == [f"part-0000{i}-of-00003.parquet" for i in range(3)]
    assert stats["rows"] == N and stats["files"] == 3 and stats["documents"] == 75
    for f in files:
        assert pq.read_schema(f).remove_metadata().equals(_parquet_roundtrip(chunk_schema(DIM)))
        assert pq.ParquetFile(f).metadata.row_group(0).column(0).compression == "ZSTD"
    t = read_table(d, "chunks").cast(chunk_schema(DIM))
    ids = t.column("chunk_id").to_pylist()
    assert len(set(ids)) == N and all(re.fullmatch(r"[0-9a-f]{32}", x) for x in ids)
    k = np.arange(N) % src.num_rows
    for col in ("text", "context", "title", "heading_path", "sentence_starts", "sentence_ends", "n_tokens"):
        assert t.column(col).to_pylist() == src.column(col).take(pa.array(k)).to_pylist(), col
    emb = np.stack(t.column("embedding").to_numpy(zero_copy_only=False))
    assert emb.dtype == np.float32 and np.allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-5)
    src_emb = np.stack(src.column("embedding").to_numpy(zero_copy_only=False))
    assert not np.any(np.all(emb == src_emb[k], axis=1))  # every vector moved
    sv = t.column("sentence_vectors").to_pylist()
    for i, v in enumerate(sv):
        if k[i] == 3:
            assert v is None
        else:
            q = np.asarray(v)
            assert q.shape == (k[i] + 1, DIM) and np.all(np.abs(q).max(axis=1) == 127)  # quantize_int8's scale
    # every ~4 consecutive chunks one document, with its documents and sources rows
    doc_ids = t.column("doc_id").to_pylist()
    assert all(doc_ids[i] == doc_ids[i - i % 4] for i in range(N)) and len(set(doc_ids)) == 75
    docs, srcs = read_table(d, "documents"), read_table(d, "sources")
    assert docs.schema.equals(DOCUMENT_SCHEMA) and srcs.schema.equals(SOURCE_SCHEMA)
    assert sorted(docs.column("doc_id").to_pylist()) == sorted(set(doc_ids))
    assert sum(docs.column("chunk_count").to_pylist()) == N
    assert set(srcs.column("uri").to_pylist()) == set(t.column("source_uri").to_pylist())
    assert set(srcs.column("status").to_pylist()) == {"live"}
    assert read_table(d, "dead_letters").num_rows == 0
    manifest = json.load(open(os.path.join(d, "manifest.json")))
    assert manifest["version"] == "v300" and manifest["counts"]["chunks"] == N
    assert manifest["counts"]["documents"] == 75 and manifest["model"]["id"] == "m"


def test_synthetic_version_is_deterministic(src, base, tmp_path):
    d, _ = base
    again = str(tmp_path / "again")
    write_synthetic_version(src, again, N, seed=0, rows_per_file=50)  # other file sizes, same rows
    assert read_table(again, "chunks").equals(read_table(d, "chunks"))
    other = str(tmp_path / "other")
    write_synthetic_version(src, other, N, seed=1, rows_per_file=128)
    assert not set(read_table(other, "chunks").column("chunk_id").to_pylist()) & \
        set(read_table(d, "chunks").column("chunk_id").to_pylist())
    with pytest.raises(FileExistsError):
        write_synthetic_version(src, d, N)


def test_changed_version_carries_the_rest_bit_identical(base, tmp_path):
    d, _ = base
    new = str(tmp_path / "nightly")
    r = write_changed_version(d, new, change_fraction=0.2, seed=1, rows_per_file=25)
    old = read_table(d, "chunks")
    assert r["removed"] == r["added"] == 60 and r["carried_chunks"] == 240 and r["carried_documents"] == 60
    changed = set(r["changed_doc_ids"])
    assert len(changed) == 15
    gone = old.filter(pc.is_in(old.column("doc_id"), pa.array(sorted(changed))))
    assert sorted(r["removed_chunk_ids"]) == sorted(gone.column("chunk_id").to_pylist())
    carried = pq.read_table(os.path.join(new, "chunks", CARRIED_FILE))
    kept = old.filter(pc.invert(pc.is_in(old.column("doc_id"), pa.array(sorted(changed)))))
    assert carried.num_rows == 240 == (1 - 0.2) * N and carried.equals(kept)  # every value, vectors included
    parts = sorted(os.path.basename(f) for f in glob.glob(os.path.join(new, "chunks", "part-*.parquet")))
    assert parts == [f"part-0000{i}-of-00003.parquet" for i in range(3)]
    t = read_table(new, "chunks")
    ids = t.column("chunk_id").to_pylist()
    assert t.num_rows == N and len(set(ids)) == N and set(r["added_chunk_ids"]) == set(ids) - set(old.column("chunk_id").to_pylist())
    fresh = t.filter(pc.is_in(t.column("chunk_id"), pa.array(r["added_chunk_ids"])))
    emb = np.stack(fresh.column("embedding").to_numpy(zero_copy_only=False))
    assert np.allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-5)
    assert set(fresh.column("doc_id").to_pylist()) == changed
    assert not set(fresh.column("content_hash").to_pylist()) & set(gone.column("content_hash").to_pylist())
    docs = read_table(new, "documents")
    assert docs.num_rows == 75 and len(set(docs.column("doc_id").to_pylist())) == 75
    assert set(docs.column("content_hash").to_pylist()) >= set(fresh.column("content_hash").to_pylist())
    srcs = read_table(new, "sources")
    assert set(srcs.column("content_hash").to_pylist()) == set(docs.column("source_hash").to_pylist())
    summary = json.load(open(os.path.join(new, "summary.json")))
    assert summary["previous_version"] == "v300" and summary["carried_chunks"] == 240 and summary["changed"] == 15
    again = write_changed_version(d, str(tmp_path / "again"), change_fraction=0.2, seed=1, rows_per_file=25)
    assert again["added_chunk_ids"] == r["added_chunk_ids"]
    assert read_table(str(tmp_path / "again"), "chunks").equals(t)


def test_peak_rss_is_the_commands_own():
    ballast = np.ones(200_000_000 // 8)  # 200 MB here must not show in the child's figure
    rc, small, wall = peak_rss_mb([sys.executable, "-c", "pass"])
    assert rc == 0 and small < 100 and wall > 0
    rc, big, _ = peak_rss_mb([sys.executable, "-c", "import numpy as np; a = np.ones(150_000_000 // 8)"])
    assert rc == 0 and big > 150
    assert peak_rss_mb([sys.executable, "-c", "raise SystemExit(3)"])[0] == 3
    del ballast


# --- the realistic corpus (bench/scale_pool.py, scale_vocab.py, scale_corpus.py) -------------
# The pool is samples/corpus here: the data dir given has no dev corpora, as in CI. Building it
# runs the real index pipeline once on samples/corpus (about a minute).

REALISTIC_N = 20_000


@pytest.fixture(scope="module")
def sample_pool(tmp_path_factory):
    from bench.scale_pool import build_pool
    return build_pool(tmp_path_factory.mktemp("no-shared-data"), cache_dir=tmp_path_factory.mktemp("pool"),
                      log=lambda *_: None)


@pytest.fixture(scope="module")
def realistic(sample_pool, tmp_path_factory):
    from bench.scale_corpus import Generator, write_realistic_version
    gen = Generator(sample_pool, seed=0, log=lambda *_: None)
    d = str(tmp_path_factory.mktemp("realistic") / "v20000")
    stats = write_realistic_version(sample_pool, d, REALISTIC_N, generator=gen, rows_per_file=8_000)
    return gen, d, stats, read_table(d, "chunks")


def _terms(texts):
    from bench.scale_pool import analyzer
    an, out = analyzer(), set()
    for i in range(0, len(texts), 2000):
        for ts in an.analyze(texts[i:i + 2000]):
            out.update(ts)
    return out


def _bm25_texts(t):
    return [(c or "") + "\n" + (x or "") for c, x in zip(t.column("context").to_pylist(), t.column("text").to_pylist())]


def test_without_shared_data_the_pool_is_the_samples(sample_pool):
    assert sample_pool.name == "sample" and sample_pool.rows.num_rows > 500
    st = sample_pool.stats
    assert 0.3 < st["beta"] < 0.9 and st["K"] > 0 and st["types"] > 3000
    assert sample_pool.questions and all(q["gold"] for q in sample_pool.questions)
    refs = {r for rs in sample_pool.refs for r in rs}
    assert {r for q in sample_pool.questions for r in q["gold"]} <= refs  # every gold document was indexed


def test_coined_words_are_distinct_single_terms():
    from bench.scale_pool import analyzer
    from bench.scale_vocab import coin
    words = [coin(k) for k in range(0, 3_000_000, 97)]
    assert len(set(words)) == len(words) and all(w.isalpha() and w.islower() for w in words)
    assert analyzer().analyze(words) == [[w] for w in words]  # Porter leaves them whole: one term each


def test_expected_distinct_matches_the_draws():
    from bench.scale_vocab import VocabularyModel
    terms = [f"t{i}" for i in range(3000)]
    v = VocabularyModel(terms, [10_000 // (i + 1) + 1 for i in range(3000)], [f"w{i}" for i in range(3000)], s=1.6)
    v.x_min = 150.0
    rng = np.random.default_rng(3)
    for m in (10_000, 200_000):
        got = len({x for x in v.draw(rng, m) if x >= v.R})
        assert abs(got - v.expected_terms(m, 0, 1.0)) < 0.03 * got


def test_vocabulary_grows_like_real_text_not_like_copies(sample_pool, realistic):
    gen, _, _, t = realistic
    assert t.num_rows == REALISTIC_N
    texts = _bm25_texts(t)
    copy_terms = len(_terms(_bm25_texts(sample_pool.rows)))  # a copy corpus of any size has the pool's terms
    quarter, whole = len(_terms(texts[:REALISTIC_N // 4])), len(_terms(texts))
    assert whole >= 10 * copy_terms, (whole, copy_terms)
    assert 1.5 * quarter < whole < 4 * quarter  # grows, sub-linearly
    from bench.scale_corpus import expected_terms
    want = expected_terms(gen, REALISTIC_N)
    assert abs(whole - want["heaps"]) < 0.15 * want["heaps"], (whole, want)  # Heaps' law of the real text


def test_questions_are_no_substrings_and_gold_is_planted_verbatim(sample_pool, realistic):
    from bench.scale_corpus import questions_for
    _, _, stats, t = realistic
    gold = stats["gold"]
    qs = questions_for(sample_pool, gold, 1000)
    assert len(qs) == len(sample_pool.questions) and len(qs) >= 5
    norm = lambda s: " ".join(s.lower().split())  # noqa: E731
    texts = t.column("text").to_pylist()
    everything = "\x00".join(norm(x) for x in texts + t.column("context").to_pylist())
    assert not [q["question"] for q in qs if norm(q["question"]) in everything]
    ids = t.column("chunk_id").to_pylist()
    row_of = {c: i for i, c in enumerate(ids)}
    pool_texts = set(sample_pool.rows.column("text").to_pylist())
    for q in qs:
        rows = [row_of[c] for c in gold[q["id"]]["chunk_ids"]]
        assert rows and all(texts[r] in pool_texts for r in rows)
        assert {t.column("doc_id")[r].as_py() for r in rows} == set(gold[q["id"]]["doc_ids"])


def test_realistic_rows_are_well_formed(sample_pool, realistic):
    from bench.scale_data import sigma_cosine
    from bench.scale_corpus import SIGMA
    gen, d, stats, t = realistic
    assert stats["files"] == 3 and len(glob.glob(os.path.join(d, "chunks", "*.parquet"))) == 3
    assert t.schema.remove_metadata().equals(_parquet_roundtrip(chunk_schema(gen.src.dim)))
    assert len(set(t.column("chunk_id").to_pylist())) == REALISTIC_N
    docs = read_table(d, "documents")
    assert sum(docs.column("chunk_count").to_pylist()) == REALISTIC_N == stats["rows"]
    assert docs.num_rows == stats["documents"] == len(set(t.column("doc_id").to_pylist()))
    sample = t.slice(0, 2000)
    for text, a, b, sv in zip(sample.column("text").to_pylist(), sample.column("sentence_starts").to_pylist(),
                              sample.column("sentence_ends").to_pylist(), sample.column("sentence_vectors").to_pylist()):
        if a is None:
            assert sv is None
            continue
        assert len(a) == len(b) == len(sv) and all(0 <= x < y <= len(text) for x, y in zip(a, b))
        assert all(text[x:y].strip() for x, y in zip(a, b))
    emb = np.stack(sample.column("embedding").to_numpy(zero_copy_only=False))
    assert np.allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-5)
    # each vector is its pool chunk's moved by noise: the closest pool vector, at about sigma_cosine
    cos = (emb @ gen.src.emb.T).max(axis=1)
    assert abs(np.median(cos) - sigma_cosine(SIGMA, gen.src.dim)) < 0.03


def test_realistic_version_is_deterministic(sample_pool, tmp_path):
    from bench.scale_corpus import write_realistic_version
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    write_realistic_version(sample_pool, a, 3_000, seed=5, rows_per_file=3_000)
    write_realistic_version(sample_pool, b, 3_000, seed=5, rows_per_file=1_100)  # other files, same rows
    assert read_table(a, "chunks").equals(read_table(b, "chunks"))
    assert read_table(a, "documents").equals(read_table(b, "documents"))
