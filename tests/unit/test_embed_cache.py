"""The embedding cache's read and commit sides (transforms/ingest/embed_cache.py): lookups in
memory-mapped .arrow files give what the whole-load of Parquet gave, loading does not read the
vectors, and a published version's new entries join the cache."""
from __future__ import annotations

import glob
import os
import tracemalloc

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from transforms.ingest.embed_cache import (ARROW_SUFFIX, NEW_ENTRIES_DIR, EmbeddingCache, cache_key,
                                           cache_schema, commit_new_entries, convert_parquet_files,
                                           write_arrow_file)

DIM = 16


def entries(n: int, seed: int, dim: int = DIM, first: int = 0, no_sentences_every: int = 5) -> pa.Table:
    """n cache entries of cache_schema(dim): keys of chunk texts first..first+n, every
    no_sentences_every-th without sentence vectors (an entry of before sentence vectors)."""
    rng = np.random.default_rng(seed)
    keys = [cache_key(f"chunk {first + i}") for i in range(n)]
    emb = rng.standard_normal((n, dim)).astype(np.float32)
    counts = rng.integers(0, 6, n)
    has = np.array([no_sentences_every == 0 or i % no_sentences_every != 1 for i in range(n)])
    starts, ends, svecs = [], [], []
    for i in range(n):
        if not has[i]:
            starts.append(None), ends.append(None), svecs.append(None)
            continue
        s = np.sort(rng.integers(0, 500, counts[i])).tolist()
        starts.append(s)
        ends.append([a + 7 for a in s])
        svecs.append([rng.integers(-127, 128, dim).astype(np.int8) for _ in s])
    return pa.table({"key": keys, "embedding": list(emb), "sentence_starts": starts,
                     "sentence_ends": ends, "sentence_vectors": svecs}).cast(cache_schema(dim))


def old_whole_load(directory: str, dim: int):
    """The loader before .arrow files (commit 99d47bf), the reference: key -> (vector, sentences)."""
    from transforms.ingest.sentvec import SentenceStore
    schema = cache_schema(dim)
    tables = []
    for f in sorted(glob.glob(os.path.join(directory, "*.parquet"))):
        t = pq.read_table(f)
        for field in schema:
            if field.name not in t.column_names:
                t = t.append_column(field, pa.nulls(t.num_rows, field.type))
        tables.append(t.select(schema.names))
    table = pa.concat_tables(tables)
    col = table.column("embedding").combine_chunks()
    vectors = col.flatten().to_numpy(zero_copy_only=False).reshape(len(col), dim)
    sent = SentenceStore.from_arrow(*(table.column(n).combine_chunks() for n in
                                      ("sentence_starts", "sentence_ends", "sentence_vectors")))
    index = {k: i for i, k in enumerate(table.column("key").to_pylist())}
    out = {}
    for k, i in index.items():
        s = None
        if sent.has_vectors[i]:
            r = sent.rows(i)
            s = (list(zip(sent.start[r].tolist(), sent.end[r].tolist())), sent.vec[r])
        out[k] = (vectors[i], s)
    return out


def assert_same(cache: EmbeddingCache, reference: dict):
    assert len(cache) == len(reference)
    for k, (vec, sent) in reference.items():
        got = cache.get(k)
        assert got is not None and got.dtype == np.float32 and np.array_equal(got, vec), k
        gs = cache.get_sentences(k)
        if sent is None:
            assert gs is None, k
        else:
            assert gs is not None and gs[0] == sent[0], k
            assert gs[1].dtype == np.int8 and np.array_equal(gs[1], sent[1]), k


def test_lookups_in_mixed_parquet_and_arrow_files_equal_the_old_whole_load(tmp_path):
    parquet_dir, mixed = tmp_path / "parquet", tmp_path / "mixed"
    parquet_dir.mkdir(), mixed.mkdir()
    tables = [entries(300, 1), entries(200, 2, first=300), entries(250, 3, first=500), None]
    tables[3] = tables[0].slice(100, 100)  # keys in two files, the same entries (same text, same vector)
    old_style = entries(150, 6, first=750).drop_columns(["sentence_starts", "sentence_ends", "sentence_vectors"])
    for i, t in enumerate(tables + [old_style]):
        pq.write_table(t, parquet_dir / f"v-{i:05d}.parquet", row_group_size=64)
        if i % 2:
            pq.write_table(t, mixed / f"v-{i:05d}.parquet", row_group_size=64)
        else:  # several record batches in one file
            write_arrow_file(t.to_batches(max_chunksize=77), str(mixed / f"v-{i:05d}{ARROW_SUFFIX}"), DIM)
    reference = old_whole_load(str(parquet_dir), DIM)
    assert len(reference) == 900
    assert_same(EmbeddingCache.load(str(mixed), DIM), reference)
    assert_same(EmbeddingCache.load(str(parquet_dir), DIM), reference)
    # converted once, the same again: every file .arrow, no Parquet left
    assert convert_parquet_files(str(mixed)) == 2 and convert_parquet_files(str(mixed)) == 0
    assert sorted(p.suffix for p in mixed.iterdir()) == [ARROW_SUFFIX] * 5
    assert_same(EmbeddingCache.load(str(mixed), DIM), reference)


def test_a_missing_key_and_an_entry_without_sentence_vectors(tmp_path):
    t = entries(40, 5)
    write_arrow_file([t], str(tmp_path / f"a{ARROW_SUFFIX}"), DIM)
    cache = EmbeddingCache.load(str(tmp_path), DIM)
    assert cache.get(cache_key("not cached")) is None and cache.get_sentences(cache_key("not cached")) is None
    assert cache.get("") is None and cache.get("x" * 40) is None
    no_sent = t.column("key")[1].as_py()  # entries(): every 5th from 1 has none
    assert cache.get(no_sent) is not None and cache.get_sentences(no_sent) is None
    for directory in (None, str(tmp_path / "absent")):
        empty = EmbeddingCache.load(directory, DIM)
        assert len(empty) == 0 and empty.get(no_sent) is None and empty.get_sentences(no_sent) is None


def test_a_cache_of_another_dimension_is_refused(tmp_path):
    write_arrow_file([entries(3, 6)], str(tmp_path / f"a{ARROW_SUFFIX}"), DIM)
    with pytest.raises(ValueError, match=f"holds {DIM}-d vectors, model has 32"):
        EmbeddingCache.load(str(tmp_path), 32)


def test_loading_does_not_read_the_vectors(tmp_path):
    """20k entries of 384-d vectors and ~8 int8 sentence vectors each (~90 MB): loading allocates
    (Arrow's pool and Python/numpy, traced) a small fraction of that, and lookups return views of
    the memory map. The whole-load of the same entries as Parquet allocates all of it."""
    dim, n = 384, 20_000
    rng = np.random.default_rng(7)
    emb = rng.standard_normal((n, dim)).astype(np.float32)
    sv = rng.integers(-127, 128, (n * 8, dim)).astype(np.int8)
    offsets = pa.array(np.arange(0, n * 8 + 1, 8, dtype=np.int32))
    pos = np.tile(np.arange(0, 80, 10, dtype=np.int32), n)
    table = pa.table({
        "key": [cache_key(f"chunk {i}") for i in range(n)],
        "embedding": pa.FixedSizeListArray.from_arrays(pa.array(emb.ravel()), dim),
        "sentence_starts": pa.ListArray.from_arrays(offsets, pa.array(pos)),
        "sentence_ends": pa.ListArray.from_arrays(offsets, pa.array(pos + 5)),
        "sentence_vectors": pa.ListArray.from_arrays(
            offsets, pa.FixedSizeListArray.from_arrays(pa.array(sv.ravel()), dim))}).cast(cache_schema(dim))
    data_bytes = emb.nbytes + sv.nbytes
    arrow_dir, parquet_dir = tmp_path / "arrow", tmp_path / "parquet"
    arrow_dir.mkdir(), parquet_dir.mkdir()
    write_arrow_file(table.to_batches(max_chunksize=5000), str(arrow_dir / f"v-00000{ARROW_SUFFIX}"), dim)
    pq.write_table(table, parquet_dir / "v-00000.parquet")
    del table, emb, sv, offsets, pos

    def allocated(load):
        tracemalloc.start()
        pool_before = pa.total_allocated_bytes()
        cache = load()
        pool = pa.total_allocated_bytes() - pool_before
        _, traced = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        return cache, pool + traced

    cache, new_bytes = allocated(lambda: EmbeddingCache.load(str(arrow_dir), dim))
    assert new_bytes < data_bytes / 20, (new_bytes, data_bytes)
    key = cache_key("chunk 12345")
    vec, (spans, svecs) = cache.get(key), cache.get_sentences(key)
    assert len(spans) == 8 and spans[1] == (10, 15) and svecs.shape == (8, dim)
    for view in (vec, svecs):  # read-only views of the mapped file, not copies
        assert not view.flags.writeable and not view.flags.owndata
    _, old_bytes = allocated(lambda: old_whole_load(str(parquet_dir), dim))
    assert old_bytes > data_bytes / 2, (old_bytes, data_bytes)


def _stage(version_dir, name: str, t: pa.Table):
    d = version_dir / NEW_ENTRIES_DIR
    d.mkdir(parents=True, exist_ok=True)
    pq.write_table(t, d / name)


def test_commit_moves_a_published_versions_entries_into_the_cache_as_arrow(tmp_path):
    cache_dir, v1, v2 = tmp_path / "cache" / "ns", tmp_path / "versions" / "v1", tmp_path / "versions" / "v2"
    first, second = entries(30, 8), entries(20, 9, first=30)
    _stage(v1, "part-0.parquet", first)
    _stage(v1, "part-1.parquet", first.slice(0, 0))  # an empty shard is dropped, not committed
    assert commit_new_entries(str(v1), str(cache_dir), "v1") == 1
    assert os.listdir(v1 / NEW_ENTRIES_DIR) == [] and os.listdir(cache_dir) == [f"v1-00000{ARROW_SUFFIX}"]
    # beside an earlier version's Parquet file (read as it is, rewritten by the next index run)
    pq.write_table(second.slice(0, 10), cache_dir / "v0-00000.parquet")
    _stage(v2, "part-0.parquet", second.slice(10))
    assert commit_new_entries(str(v2), str(cache_dir), "v2") == 1
    assert sorted(os.listdir(cache_dir)) == ["v0-00000.parquet", f"v1-00000{ARROW_SUFFIX}", f"v2-00000{ARROW_SUFFIX}"]
    for converted in (0, 1):
        cache = EmbeddingCache.load(str(cache_dir), DIM)
        assert len(cache) == 50
        for t in (first, second):
            for k, e in zip(t.column("key").to_pylist(), t.column("embedding").to_pylist()):
                assert np.array_equal(cache.get(k), np.array(e, np.float32))
        assert convert_parquet_files(str(cache_dir)) == 1 - converted
    # a commit done again after a kill (a file left in the version dir) never overwrites the
    # files already moved
    _stage(v2, "part-1.parquet", entries(5, 10, first=50))
    assert commit_new_entries(str(v2), str(cache_dir), "v2") == 1
    assert f"v2-00001{ARROW_SUFFIX}" in os.listdir(cache_dir)
    assert len(EmbeddingCache.load(str(cache_dir), DIM)) == 55


def test_the_llm_contexts_are_still_renamed_as_parquet(tmp_path):
    from transforms.ingest.context_cache import CONTEXT_SCHEMA, NEW_CONTEXTS_DIR, load_contexts
    v = tmp_path / "v1"
    (v / NEW_CONTEXTS_DIR).mkdir(parents=True)
    pq.write_table(pa.table({"key": ["a", "b"], "context": ["x", "y"]}, schema=CONTEXT_SCHEMA),
                   v / NEW_CONTEXTS_DIR / "part-0.parquet")
    cache_dir = tmp_path / "contexts"
    assert commit_new_entries(str(v), str(cache_dir), "v1", NEW_CONTEXTS_DIR) == 1
    assert os.listdir(cache_dir) == ["v1-00000.parquet"]
    assert load_contexts(str(cache_dir)) == {"a": "x", "b": "y"}
