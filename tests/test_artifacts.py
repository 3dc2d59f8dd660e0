"""Artifact build (DuckDB + vss + fts) and batch retrieval over it."""
from __future__ import annotations

import datetime as dt
import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from transforms.index.bm25 import bm25_tokens
from transforms.query.retrieve import hnsw_recall_at_k
from transforms.index.artifacts import (FTS_SCHEMA, build_artifact,
                                  open_artifact, read_meta)
from transforms.records import chunk_schema

EMBEDDING_DIM = 384
CHUNK_SCHEMA = chunk_schema(EMBEDDING_DIM)
from transforms.query.retrieve import (BM25Index, DenseIndex, FilterMasks, build_filter_mask,
                                 choose_dense_mode, fetch_chunks, search_hnsw)

N = 300
TOPICS = ["install the agent on Debian", "rotate the TLS certificates", "configure the proxy server",
          "backup the database nightly", "monitor disk usage alerts", "reset a forgotten password",
          "upgrade the cluster nodes", "export billing reports"]
WORDS = ("service network storage users timeout retry logs policy kernel memory queue "
         "scheduler token session cache replica shard latency throughput firewall").split()
SPECIAL = {
    7: "If the client logs ERR_CONN_4042 the upstream refused the handshake; retry after 30 s.",
    8: "ERR_CONN_4043 means the upstream timed out, unlike other connection errors.",
    9: "Our controls are certified against ISO-27001 and audited yearly.",
    10: "Quality management follows ISO-9001; version v2.3.1 of the manual applies.",
    11: "Staff only: the salary review process for staff members and the payroll calendar.",
}


def _rows(rng: np.random.Generator) -> list[dict]:
    rows = []
    now = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
    for i in range(N):
        topic = TOPICS[i % len(TOPICS)]
        filler = " ".join(rng.choice(WORDS, size=25))
        text = SPECIAL.get(i, f"To {topic}, check the {filler}.")
        vec = rng.standard_normal(EMBEDDING_DIM).astype(np.float32)
        rows.append({
            "chunk_id": f"c{i:05d}", "doc_id": f"d{i // 3}", "content_hash": "h", "ordinal": i % 3,
            "source_uri": f"s3://b/doc{i // 3}.md", "source_uris": [f"s3://b/doc{i // 3}.md"],
            "title": f"Guide {i // 3}", "heading_path": ["Ops", topic], "page": None,
            "text": text, "context": f"Guide {i // 3} › Ops › {topic}", "n_tokens": 40,
            "embedding": (vec / np.linalg.norm(vec)).tolist(), "model_id": "m", "model_sha256": "x",
            "chunker_version": "1", "acl": ["staff"] if i == 11 else [],
            "metadata": json.dumps({"product": "alpha" if i % 2 else "beta", "tier": i % 3}),
            "indexed_at": now,
        })
    return rows


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    d = tmp_path_factory.mktemp("art")
    rng = np.random.default_rng(0)
    rows = _rows(rng)
    order = rng.permutation(N)  # shards not in chunk_id order: chunk_no must not care
    files = []
    for s in range(3):
        part = [rows[j] for j in order[s::3]]
        f = str(d / f"chunks-{s}.parquet")
        pq.write_table(pa.Table.from_pylist(part, schema=CHUNK_SCHEMA), f)
        files.append(f)
    db = str(d / "artifact.duckdb")
    stats = build_artifact(files, db, hnsw_m=16, hnsw_ef_construction=128, hnsw_ef_search=64)
    con = open_artifact(db)
    yield {"db": db, "files": files, "stats": stats, "con": con, "rows": rows}
    con.close()


def test_build_stats_meta_and_numbering(built):
    con, stats = built["con"], built["stats"]
    assert stats["rows"] == N and all(stats[k] >= 0 for k in ("table_s", "hnsw_s", "fts_s"))
    meta = read_meta(con)
    assert meta["rows"] == N and meta["metric"] == "cosine" and meta["hnsw_ef_search"] == 64
    got = con.execute("SELECT chunk_no, chunk_id FROM chunks ORDER BY chunk_no").fetchall()
    assert got == [(i, f"c{i:05d}") for i in range(N)]
    typ = con.execute("SELECT data_type FROM information_schema.columns "
                      "WHERE table_name='chunks' AND column_name='embedding'").fetchone()[0]
    assert typ == f"FLOAT[{EMBEDDING_DIM}]"
    assert not os.path.exists(built["db"] + ".tmp")


def test_open_loads_vss_and_uses_hnsw(built):
    con = built["con"]
    loaded = dict(con.execute("SELECT extension_name, loaded FROM duckdb_extensions() "
                              "WHERE extension_name IN ('vss', 'fts')").fetchall())
    assert loaded == {"vss": True, "fts": True}
    assert con.execute("SELECT current_setting('hnsw_ef_search')").fetchone()[0] == 64
    v = "[" + ",".join(["0.05"] * EMBEDDING_DIM) + f"]::FLOAT[{EMBEDDING_DIM}]"
    plan = con.execute(f"EXPLAIN SELECT chunk_no FROM chunks "
                       f"ORDER BY array_cosine_distance(embedding, {v}) LIMIT 5").fetchall()
    assert "HNSW_INDEX_SCAN" in "".join(r[1] for r in plan)


def test_open_missing_file_raises(tmp_path):
    with pytest.raises(FileNotFoundError):
        open_artifact(str(tmp_path / "nope.duckdb"))


def test_dense_exact_and_hnsw_agree(built):
    con = built["con"]
    dense = DenseIndex.from_artifact(con)
    m = np.array([r["embedding"] for r in built["rows"]], np.float32)
    np.testing.assert_allclose(dense.matrix, m, atol=1e-6)
    rng = np.random.default_rng(1)
    q = m[rng.choice(N, 20, replace=False)] + 0.05 * rng.standard_normal((20, EMBEDDING_DIM))
    s, idx = dense.search(q, 10)
    qn = q / np.linalg.norm(q, axis=1, keepdims=True)
    ref = np.argsort(-(qn @ m.T), axis=1)[:, :10]
    assert (idx == ref).all() and (np.diff(s, axis=1) <= 1e-6).all()
    assert hnsw_recall_at_k(con, q, k=10) >= 0.9
    hs, hi = search_hnsw(con, q, 10)
    assert (hi[:, 0] == idx[:, 0]).all()
    np.testing.assert_allclose(hs[:, 0], s[:, 0], atol=1e-5)


def test_choose_dense_mode():
    assert choose_dense_mode(1000) == "exact"
    assert choose_dense_mode(5_000_000) == "hnsw"
    assert choose_dense_mode(10, "hnsw") == "hnsw"
    with pytest.raises(ValueError):
        choose_dense_mode(10, "fast")


def test_bm25_tokens_keep_codes():
    toks = bm25_tokens("Got ERR_CONN_4042 under ISO-27001, see v2.3.1 — Café")
    for t in ("err_conn_4042", "4042", "iso_27001", "27001", "iso", "v2_3_1", "cafe"):
        assert t in toks
    assert bm25_tokens("err-conn-4042")[-1] == bm25_tokens("ERR_CONN_4042")[-1]
    assert "the" not in bm25_tokens("the agent")


def test_bm25_batch_matches_match_bm25(built):
    con = built["con"]
    bm = BM25Index(con)
    queries = ["install agent Debian", "rotate TLS certificates proxy", "disk usage alerts",
               "ERR_CONN_4042 handshake", "billing reports export users"]
    scores, idx = bm.search(queries, 10)
    for qi, q in enumerate(queries):
        qtext = " ".join(bm.analyzer.analyze([q])[0])
        ref = con.execute(f"""
            SELECT chunk_no, score FROM (
              SELECT chunk_no, {FTS_SCHEMA}.match_bm25(chunk_no, ?) AS score FROM chunks_bm25)
            WHERE score IS NOT NULL ORDER BY score DESC, chunk_no LIMIT 10""", [qtext]).fetchall()
        k = len(ref)
        assert k >= 2 and (idx[qi, k:] == -1).all() and np.isneginf(scores[qi, k:]).all()
        np.testing.assert_allclose(scores[qi, :k], [r[1] for r in ref], rtol=1e-5)
        # same ids with the same scores; only exact ties at the cut may differ
        ref_map = dict(ref)
        for i, sc in zip(idx[qi, :k], scores[qi, :k]):
            assert abs(sc - ref_map.get(int(i), ref[-1][1])) <= 1e-5 * abs(sc)


def test_code_tokens_rank_first(built):
    bm = BM25Index(built["con"])
    _, idx = bm.search(["ERR_CONN_4042", "ISO-27001", "what does err-conn-4043 mean", "manual v2.3.1"], 3)
    assert idx[:, 0].tolist() == [7, 9, 8, 10]


def test_acl_mask(built):
    con = built["con"]
    masks = FilterMasks(con)
    public = masks.get(None)
    staff = masks.get(["staff", "eng"])
    assert not public[11] and public.sum() == N - 1 and staff.all()
    assert masks.get(["eng", "staff"]) is staff  # cached, group order irrelevant
    bm = BM25Index(con)
    q = ["salary review payroll staff"]
    _, no = bm.search(q, 5, allowed=public)
    _, yes = bm.search(q, 5, allowed=staff)
    assert 11 not in no and yes[0, 0] == 11
    dense = DenseIndex.from_artifact(con)
    v = dense.matrix[[11]]
    s, no = dense.search(v, 10, allowed=public)
    assert 11 not in no and (no >= 0).all() and np.isfinite(s).all()  # filter still fills top_n
    _, yes = dense.search(v, 10, allowed=staff)
    assert yes[0, 0] == 11
    _, h = search_hnsw(con, v, 10, allowed=public)
    assert 11 not in h and (h >= 0).all()
    # per-query masks (b, n)
    _, both = dense.search(np.vstack([v, v]), 3, allowed=np.vstack([public, staff]))
    assert both[0, 0] != 11 and both[1, 0] == 11


def test_metadata_filter(built):
    con = built["con"]
    m = build_filter_mask(con, ["staff"], {"product": "alpha", "tier": 1})
    expect = np.array([(i % 2 == 1) and (i % 3 == 1) for i in range(N)])
    assert (m == expect).all()
    assert not build_filter_mask(con, ["staff"], {"tier": "1"}).any()  # JSON types matter
    assert not build_filter_mask(con, ["staff"], {"missing": "x"}).any()
    # also from the Parquet rows directly (numbered by chunk_id like the build)
    tbl = pa.concat_tables([pq.read_table(f) for f in built["files"]])
    assert (build_filter_mask(tbl, ["staff"], {"product": "alpha", "tier": 1}) == expect).all()
    dense = DenseIndex.from_artifact(con)
    _, idx = dense.search(dense.matrix[:4], 20, allowed=m)
    assert expect[idx].all()


def test_fetch_chunks_order(built):
    rows = fetch_chunks(built["con"], np.array([[9, -1, 7]]))
    assert [r["chunk_id"] for r in rows] == ["c00009", "c00007"]
    assert "ISO-27001" in rows[0]["text"] and rows[0]["metadata"]["tier"] == 0
    assert rows[0]["acl"] == [] and rows[0]["heading_path"][0] == "Ops"


def test_build_is_atomic(built, tmp_path):
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"not parquet")
    db = str(tmp_path / "a.duckdb")
    with pytest.raises(Exception):
        build_artifact([built["files"][0], str(bad)], db)
    assert not os.path.exists(db) and not os.path.exists(db + ".tmp")
    # duplicate chunk ids would make chunk_no ambiguous
    with pytest.raises(ValueError, match="duplicate"):
        build_artifact([built["files"][0], built["files"][0]], db)
    assert not os.path.exists(db)


def test_build_without_hnsw(built, tmp_path):
    db = str(tmp_path / "nohnsw.duckdb")
    stats = build_artifact(built["files"][:1], db, with_hnsw=False)
    with open_artifact(db) as con:
        assert read_meta(con)["hnsw"] is False and stats["rows"] == N // 3
        dense = DenseIndex.from_artifact(con)
        _, exact = dense.search(dense.matrix[:3], 5)
        _, brute = search_hnsw(con, dense.matrix[:3], 5)  # no index: DuckDB scans, still exact
        assert (exact == brute).all() and (exact[:, 0] == [0, 1, 2]).all()


def test_build_takes_the_dimension_from_the_shards(tmp_path):
    """A model with another vector size (ModelSpec.dim) builds and searches the same way."""
    rng = np.random.default_rng(1)
    rows = _rows(rng)[:40]
    for r in rows:
        v = rng.standard_normal(16).astype(np.float32)
        r["embedding"] = (v / np.linalg.norm(v)).tolist()
    f = str(tmp_path / "chunks.parquet")
    pq.write_table(pa.Table.from_pylist(rows, schema=chunk_schema(16)), f)
    db = str(tmp_path / "d16.duckdb")
    build_artifact([f], db, with_hnsw=True)
    with open_artifact(db) as con:
        assert read_meta(con)["dim"] == 16
        dense = DenseIndex.from_artifact(con)
        assert dense.matrix.shape == (40, 16)
        _, exact = dense.search(dense.matrix[:3], 5)
        _, hnsw = search_hnsw(con, dense.matrix[:3], 5)
        assert (exact[:, 0] == [0, 1, 2]).all() and (hnsw[:, 0] == [0, 1, 2]).all()
