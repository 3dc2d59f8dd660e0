"""Build and open the DuckDB retrieval artifact: chunks + HNSW (vss) + BM25 (fts).

One file holds everything the answer job needs:
  chunks          every chunk_schema(dim) column plus chunk_no (0..n-1, ORDER BY chunk_id),
                  the row number of a chunk in every matrix retrieve.py loads
  chunks_bm25     (chunk_no, bm25_text): context + text already tokenised by
                  bm25_tokens(), so fts only splits on spaces; the query side
                  runs the same function and the two can never drift apart
  fts_main_chunks_bm25.*  the fts index over chunks_bm25 (docs/terms/dict/stats)
  artifact_meta   key -> JSON value: build stats, settings (dim, hnsw: whether the HNSW
                  index was built), hnsw recall
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Optional

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from transforms.index.bm25 import ANALYZER_VERSION, Analyzer
from transforms.records import CHUNK_COLUMNS, embedding_dim

# SQL distance per vss metric: the ORDER BY must use the metric's own function
# or the optimizer will not use the HNSW index.
DISTANCE_FN = {"cosine": "array_cosine_distance", "l2sq": "array_distance",
               "ip": "array_negative_inner_product"}
BM25_TABLE = "chunks_bm25"
# BM25 settings, recorded in artifact_meta and read back by the query side (retrieve.BM25Index).
BM25_STEMMER = "porter"
BM25_K1 = 1.2
BM25_B = 0.75
FTS_SCHEMA = f"fts_main_{BM25_TABLE}"

# --- extensions ----------------------------------------------------------------------
# Offline: LOAD the binaries shipped in the duckdb-extension-* wheels by path. A
# plain `LOAD vss` would look in ~/.duckdb/extensions and, with autoinstall on,
# try the network. Without vss loaded DuckDB still opens a file with an HNSW index
# and silently answers the ORDER BY ... LIMIT by a full scan.
_NO_AUTO = {"autoinstall_known_extensions": "false", "autoload_known_extensions": "false"}


def extension_path(name: str) -> str:
    import importlib
    pkg = importlib.import_module(f"duckdb_extension_{name}")
    base = Path(pkg.__file__).parent / "extensions" / f"v{duckdb.__version__}"
    path = base / f"{name}.duckdb_extension"
    if not path.exists():  # duckdb and extension wheels must be the same version
        raise RuntimeError(f"{path} missing: install duckdb-extension-{name}=={duckdb.__version__}")
    return str(path)


def load_extensions(con: duckdb.DuckDBPyConnection) -> None:
    for name in ("vss", "fts"):
        con.execute(f"LOAD '{extension_path(name)}'")


def connect(path: str, read_only: bool = False, threads: Optional[int] = None,
            memory_limit: Optional[str] = None):
    config = dict(_NO_AUTO)
    if threads:
        config["threads"] = str(threads)
    if memory_limit:  # DuckDB's own default is 80% of RAM: a worker sets what it can afford
        config["memory_limit"] = memory_limit
    con = duckdb.connect(path, read_only=read_only, config=config)
    load_extensions(con)
    return con


# --- meta ------------------------------------------------------------------------------
def write_meta(con: duckdb.DuckDBPyConnection, values: dict[str, Any]) -> None:
    con.execute("CREATE TABLE IF NOT EXISTS artifact_meta (key VARCHAR PRIMARY KEY, value VARCHAR)")
    for k, v in values.items():
        con.execute("INSERT OR REPLACE INTO artifact_meta VALUES (?, ?)", [k, json.dumps(v)])


def read_meta(con: duckdb.DuckDBPyConnection) -> dict[str, Any]:
    return {k: json.loads(v) for k, v in con.execute("SELECT key, value FROM artifact_meta").fetchall()}


# --- build -----------------------------------------------------------------------------
def build_artifact(chunk_files: list[str], db_path: str, *, hnsw_m: int = 16,
                   hnsw_ef_construction: int = 128, hnsw_ef_search: int = 64,
                   metric: str = "cosine", threads: Optional[int] = None,
                   with_hnsw: bool = True) -> dict:
    """Build the artifact at db_path from Parquet chunk shards; returns the stats.

    The vector dimension is the shards' own (FLOAT[ModelSpec.dim]). with_hnsw=False
    skips the index (the slowest part by far) for corpora that
    retrieve.choose_dense_mode() will search exactly anyway (transforms/index/build.py
    decides); artifact_meta records it as `hnsw`, and the engine then searches exactly."""
    if metric not in DISTANCE_FN:
        raise ValueError(f"metric {metric!r} not in {sorted(DISTANCE_FN)}")
    if not chunk_files:
        raise ValueError("no chunk files")
    tmp = db_path + ".tmp"
    for p in (tmp, tmp + ".wal"):  # leftovers of a crashed build
        if os.path.exists(p):
            os.remove(p)
    dim = embedding_dim(pq.read_schema(chunk_files[0]))
    stats: dict[str, Any] = {}
    t_all = time.perf_counter()
    con = connect(tmp, threads=threads)
    try:
        t = time.perf_counter()
        have = {r[0] for r in con.execute("DESCRIBE SELECT * FROM read_parquet(?, union_by_name = true)",
                                          [list(chunk_files)]).fetchall()}
        # shards written before a column existed (the sentence vectors) read as NULL
        new_types = {"sentence_starts": "INTEGER[]", "sentence_ends": "INTEGER[]",
                     "sentence_vectors": f"TINYINT[{int(dim)}][]"}
        cols = ", ".join(f'"{n}"' if n in have else f'NULL::{new_types[n]} AS "{n}"'
                         for n in CHUNK_COLUMNS if n != "embedding")
        con.execute(f"""
            CREATE TABLE chunks AS
            SELECT (row_number() OVER (ORDER BY chunk_id) - 1)::INTEGER AS chunk_no, {cols},
                   embedding::FLOAT[{int(dim)}] AS embedding
            FROM read_parquet(?, union_by_name = true) ORDER BY chunk_id""", [list(chunk_files)])
        n, n_ids = con.execute("SELECT count(*), count(DISTINCT chunk_id) FROM chunks").fetchone()
        if n == 0:
            raise ValueError("chunk files hold no rows")
        if n_ids != n:  # chunk_no would not be deterministic
            raise ValueError(f"{n - n_ids} duplicate chunk_id rows in the shards")
        stats["rows"] = n
        stats["table_s"] = time.perf_counter() - t

        t = time.perf_counter()
        if with_hnsw:  # persistence is "experimental": the index is rebuilt, never updated
            con.execute("SET hnsw_enable_experimental_persistence = true")
            con.execute(f"CREATE INDEX chunks_hnsw ON chunks USING HNSW (embedding) WITH "
                        f"(metric='{metric}', M={int(hnsw_m)}, ef_construction={int(hnsw_ef_construction)})")
        stats["hnsw_s"] = time.perf_counter() - t

        t = time.perf_counter()
        rows = con.execute("SELECT chunk_no, coalesce(context, '') || '\n' || coalesce(text, '') "
                           "FROM chunks ORDER BY chunk_no").fetchall()
        docs = Analyzer(con, BM25_STEMMER).analyze([r[1] for r in rows])
        bm25 = pa.table({"chunk_no": pa.array([r[0] for r in rows], pa.int32()),
                         "bm25_text": pa.array([" ".join(d) for d in docs], pa.string())})
        del rows, docs
        con.register("bm25_src", bm25)
        con.execute(f"CREATE TABLE {BM25_TABLE} AS SELECT * FROM bm25_src")
        con.unregister("bm25_src")
        stats["tokenize_s"] = time.perf_counter() - t
        t = time.perf_counter()
        # Text is pre-analysed: fts must only split on whitespace and change nothing.
        con.execute(f"PRAGMA create_fts_index('{BM25_TABLE}', 'chunk_no', 'bm25_text', "
                    "stemmer='none', stopwords='none', ignore='\\s+', strip_accents=0, lower=0)")
        stats["fts_s"] = time.perf_counter() - t

        stats["build_s"] = time.perf_counter() - t_all
        write_meta(con, {**stats, "dim": dim, "metric": metric, "hnsw": with_hnsw,
                         "hnsw_m": hnsw_m, "hnsw_ef_construction": hnsw_ef_construction,
                         "hnsw_ef_search": hnsw_ef_search, "bm25_stemmer": BM25_STEMMER,
                         "bm25_k1": BM25_K1, "bm25_b": BM25_B,
                         "bm25_analyzer": ANALYZER_VERSION, "duckdb_version": duckdb.__version__,
                         "chunk_files": len(chunk_files), "built_at": time.time()})
        con.execute("CHECKPOINT")
    except BaseException:
        con.close()
        for p in (tmp, tmp + ".wal"):
            if os.path.exists(p):
                os.remove(p)
        raise
    con.close()
    os.replace(tmp, db_path)  # readers see the whole artifact or none
    return stats


def open_artifact(db_path: str, read_only: bool = True, ef_search: Optional[int] = None,
                  threads: Optional[int] = None) -> duckdb.DuckDBPyConnection:
    """Connection with vss + fts loaded from the wheels and hnsw_ef_search set."""
    if not os.path.exists(db_path):  # duckdb would silently create an empty file
        raise FileNotFoundError(db_path)
    con = connect(db_path, read_only=read_only, threads=threads)
    if ef_search is None:
        ef_search = read_meta(con).get("hnsw_ef_search", 64)
    con.execute(f"SET hnsw_ef_search = {int(ef_search)}")
    return con
