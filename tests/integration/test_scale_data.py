"""bench/scale_data.py's peak RSS of a command, and the realistic corpus built from samples/corpus by the
real index pipeline (bench/scale_pool.py, scale_vocab.py, scale_corpus.py)."""
import glob
import os
import sys

import numpy as np
import pytest

from bench.scale_data import peak_rss_mb
from tests.unit.test_scale_data import _parquet_roundtrip
from transforms.index.shards import read_table
from transforms.records import chunk_schema


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
