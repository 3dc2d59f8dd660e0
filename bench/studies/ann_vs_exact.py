"""Exact dense search against an HNSW index (DuckDB vss) at the segment size.

    python -m bench.studies.ann_vs_exact [--sizes 100000,250000] [--questions 500]
                                         [--out bench/results/ann_vs_exact.json]

Answers: at `index.segment_max_chunks` (250k chunks by default), is exact dense search (one
float32 matrix product per question batch, what transforms/query/segment_search.py's
SegmentSearcher does per segment) faster than the HNSW index the project can build? It is what
`retrieve.mode: hnsw` being refused rests on (configs/schema.py, docs/benchmarks.md).

Vectors: the scale bench's (bench/scale_data.py): the `embedding` column of the seed-0 synthetic
version `python -m bench.scale_data --chunks N` writes, made here in memory by the same
function (_perturbed_block, NOISE_BLOCK rows at a time: row i is source row i % len(source) plus
SIGMA Gaussian noise, re-normalised; 384-d unit float32). The source rows are the sample corpus
indexed once with the real pipeline (make_source_rows, cached under out/scale/source-index).
Questions: real ones, as the scale bench makes them (bench/scale_bench.py _questions: the first
sentence of each source row, written to out/ann_vs_exact/questions.jsonl), embedded with the
packaged all-MiniLM model (Embedder.encode_queries); --questions beyond the source rows wrap
round and repeat.

Per size, in one process, sizes in the order given:
  exact  transforms.query.retrieve.DenseIndex(vectors).search(Q, 10): Q @ V.T in blocks of
         _SCORE_BLOCK floats and a top-10 by argpartition (_topk_dense), the blocks and top-k
         SegmentSearcher.search runs (it cuts dense_n + MARGIN and re-scores those rows in
         float64; not timed here). The whole question batch, best of 3; and, once, one
         question at a time (exact_qps_one_by_one: what batching buys).
  hnsw   a DuckDB file (out/ann_vs_exact/hnsw-N.duckdb, removed after) with
         chunks(chunk_no, embedding FLOAT[384]) and the CREATE INDEX ... USING HNSW statement of
         transforms/index/artifacts.py (metric cosine, cfg.artifacts.hnsw m / ef_construction,
         extensions loaded from the wheels by artifacts.connect: nothing is downloaded). Build
         time is that statement's alone (artifacts' hnsw_s). Then reopened read-only by
         artifacts.open_artifact (ef_search set) and queried with
         transforms.query.retrieve.search_hnsw one question at a time, as HNSW is used; the
         plan is checked to be an HNSW_INDEX_SCAN. recall@10: the share of exact's top 10
         that HNSW returns, averaged over the questions.
  rss    ru_maxrss of this process after the build (a peak so far: it includes the vectors,
         the exact search's copy of them and earlier sizes), and VmRSS just before it.
Writes a list of rows (chunks, exact_qps, hnsw_qps, hnsw_build_s, hnsw_recall_at_10,
exact_vs_hnsw, settings, ...) to --out and a table beside it (.md).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WORK = os.path.join(ROOT, "out", "ann_vs_exact")
OUT = os.path.join(ROOT, "bench", "results", "ann_vs_exact.json")
K = 10
COMMAND = "python -m bench.studies.ann_vs_exact"


def _log(*a) -> None:
    print(*a, file=sys.stderr, flush=True)


# --- inputs ----------------------------------------------------------------------------------

def scale_vectors(src, n: int, seed: int = 0) -> np.ndarray:
    """The embeddings of rows [0, n) of scale_data's synthetic version `seed` (bit for bit the
    `embedding` column write_synthetic_version writes), made NOISE_BLOCK rows at a time; the
    sentence vectors _perturbed_block also makes are dropped block by block."""
    from bench.scale_data import NOISE_BLOCK, SIGMA, _perturbed_block
    out = np.empty((n, src.dim), np.float32)
    for a in range(0, n, NOISE_BLOCK):
        b = min(n, a + NOISE_BLOCK)
        out[a:b] = _perturbed_block(src, seed, a, b, SIGMA)[0]
    return out


def real_questions(n: int) -> tuple[list[str], np.ndarray]:
    """The scale bench's questions (first sentences of the source rows), embedded by the model."""
    from bench.scale_bench import _questions
    from configs.schema import load_config
    from transforms.ingest.embed import Embedder, model_spec_from_config
    os.makedirs(WORK, exist_ok=True)
    path = _questions(os.path.join(WORK, "questions.jsonl"), n)
    with open(path, encoding="utf-8") as f:
        texts = [json.loads(line)["question"] for line in f]
    qv = Embedder(model_spec_from_config(load_config(None))).encode_queries(texts)
    return texts, qv


# --- the two searches ------------------------------------------------------------------------

def _rss_mb() -> float:
    try:
        with open("/proc/self/status", encoding="utf-8") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return float("nan")


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KB on Linux


def exact_search(vectors: np.ndarray, qvecs: np.ndarray, repeats: int = 3) -> tuple[np.ndarray, float, float]:
    """(top-K chunk numbers per question, best-of-`repeats` seconds for the whole batch,
    seconds for the questions one at a time, once: what batching buys)."""
    from bench.common import best_of
    from transforms.query.retrieve import DenseIndex
    dense = DenseIndex(vectors)
    dense.search(qvecs[:2], K)  # warm-up
    s = best_of(lambda: dense.search(qvecs, K), repeats=repeats)
    t = time.perf_counter()
    for i in range(len(qvecs)):
        dense.search(qvecs[i:i + 1], K)
    return dense.search(qvecs, K)[1], s, time.perf_counter() - t


def build_hnsw(vectors: np.ndarray, db: str, m: int, ef_construction: int, metric: str = "cosine") -> dict:
    """A DuckDB file holding chunks(chunk_no, embedding) and the HNSW index artifacts.py builds
    (its SQL, its connection); {"build_s", "table_s", "rss_before_mb", "peak_rss_mb"}."""
    import pyarrow as pa
    from transforms.index.artifacts import connect, write_meta
    for p in (db, db + ".wal"):
        if os.path.exists(p):
            os.remove(p)
    n, dim = vectors.shape
    con = connect(db)
    try:
        t = time.perf_counter()
        src = pa.table({"chunk_no": pa.array(np.arange(n, dtype=np.int32)),
                        "embedding": pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1)), dim)})
        con.register("vec_src", src)
        con.execute(f"CREATE TABLE chunks AS SELECT chunk_no::INTEGER AS chunk_no, "
                    f"embedding::FLOAT[{int(dim)}] AS embedding FROM vec_src ORDER BY chunk_no")
        con.unregister("vec_src")
        del src
        table_s = time.perf_counter() - t
        rss_before = _rss_mb()
        t = time.perf_counter()
        con.execute("SET hnsw_enable_experimental_persistence = true")  # as artifacts.build_artifact
        con.execute(f"CREATE INDEX chunks_hnsw ON chunks USING HNSW (embedding) WITH "
                    f"(metric='{metric}', M={int(m)}, ef_construction={int(ef_construction)})")
        build_s = time.perf_counter() - t
        peak = _peak_rss_mb()
        write_meta(con, {"metric": metric, "hnsw": True, "hnsw_m": m, "hnsw_ef_construction": ef_construction})
        con.execute("CHECKPOINT")
    finally:
        con.close()
    return {"build_s": build_s, "table_s": table_s, "rss_before_mb": rss_before, "peak_rss_mb": peak}


def hnsw_search(db: str, qvecs: np.ndarray, ef_search: int) -> tuple[np.ndarray, float, float, bool]:
    """(top-K per question, seconds for all questions one at a time, seconds to open, whether
    the plan is an HNSW index scan)."""
    from transforms.index.artifacts import DISTANCE_FN, open_artifact
    from transforms.query.retrieve import _vec_sql, search_hnsw
    t = time.perf_counter()
    con = open_artifact(db, read_only=True, ef_search=ef_search)
    try:
        search_hnsw(con, qvecs[:1], K)  # loads the index
        open_s = time.perf_counter() - t
        plan = "\n".join(str(r[-1]) for r in con.execute(
            f"EXPLAIN SELECT chunk_no, {DISTANCE_FN['cosine']}(embedding, {_vec_sql(qvecs[0])}) AS d "
            f"FROM chunks ORDER BY d LIMIT {K}").fetchall())
        search_hnsw(con, qvecs[:2], K)  # warm-up
        t = time.perf_counter()
        approx = np.concatenate([search_hnsw(con, qvecs[i:i + 1], K)[1] for i in range(len(qvecs))])
        s = time.perf_counter() - t
    finally:
        con.close()
    return approx, s, open_s, "HNSW_INDEX_SCAN" in plan


def recall_at_k(exact: np.ndarray, approx: np.ndarray, k: int = K) -> float:
    return float(np.mean([len(set(e[e >= 0][:k]) & set(a[a >= 0][:k])) / k for e, a in zip(exact, approx)]))


def measure(vectors: np.ndarray, qvecs: np.ndarray, hnsw, db: str, log=_log) -> dict:
    """One row of the study for these vectors and questions; hnsw: cfg.artifacts.hnsw."""
    n, nq = len(vectors), len(qvecs)
    exact, exact_s, one_s = exact_search(vectors, qvecs)
    log(f"ann_vs_exact: {n} chunks: exact {nq} questions in {exact_s:.3f} s (best of 3); building HNSW")
    b = build_hnsw(vectors, db, hnsw.m, hnsw.ef_construction)
    log(f"ann_vs_exact: {n} chunks: HNSW built in {b['build_s']:.1f} s")
    try:
        approx, hnsw_s, open_s, uses_index = hnsw_search(db, qvecs, hnsw.ef_search)
    finally:
        for p in (db, db + ".wal"):
            if os.path.exists(p):
                os.remove(p)
    exact_qps, hnsw_qps = nq / exact_s, nq / hnsw_s
    return {"chunks": n, "questions": nq,
            "exact_qps": round(exact_qps, 1), "exact_batch_s": round(exact_s, 4),
            "exact_qps_one_by_one": round(nq / one_s, 1),
            "hnsw_qps": round(hnsw_qps, 1), "hnsw_ms_per_question": round(1e3 * hnsw_s / nq, 3),
            "hnsw_build_s": round(b["build_s"], 2), "hnsw_recall_at_10": round(recall_at_k(exact, approx), 4),
            "exact_vs_hnsw": round(exact_qps / hnsw_qps, 1),
            "hnsw_open_s": round(open_s, 2), "table_s": round(b["table_s"], 2),
            "rss_before_build_mb": round(b["rss_before_mb"]), "peak_rss_after_build_mb": round(b["peak_rss_mb"]),
            "settings": {"k": K, "metric": "cosine", "m": hnsw.m, "ef_construction": hnsw.ef_construction,
                         "ef_search": hnsw.ef_search, "plan_uses_hnsw_index": uses_index,
                         "exact": "DenseIndex.search, whole batch, best of 3",
                         "hnsw": "search_hnsw, one question at a time", "cpus": os.cpu_count()}}


# --- output ----------------------------------------------------------------------------------

def table(rows: list[dict], command: str) -> str:
    lines = [f"`{command}`", "",
             "| chunks | questions | exact q/s (batch) | HNSW q/s (one by one) | exact ÷ HNSW | HNSW build s "
             "| HNSW recall@10 | exact q/s (one by one) | peak RSS after build MB |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['chunks']:,} | {r['questions']} | {r['exact_qps']:,.0f} | {r['hnsw_qps']:,.0f} "
                     f"| {r['exact_vs_hnsw']}× | {r['hnsw_build_s']:.1f} | {r['hnsw_recall_at_10']:.3f} "
                     f"| {r['exact_qps_one_by_one']:,.0f} | {r['peak_rss_after_build_mb']:,} |")
    s = rows[0]["settings"] if rows else {}
    lines += ["", f"HNSW: DuckDB vss, metric cosine, M={s.get('m')}, ef_construction={s.get('ef_construction')}, "
              f"ef_search={s.get('ef_search')} (cfg.artifacts.hnsw); exact: one float32 matmul per block of the "
              f"question batch and an argpartition top-{K}. {s.get('cpus')} CPUs. HNSW q/s includes "
              f"search_hnsw's SQL round trip per question (a {K}-row query with the vector inline). Recall is "
              f"against exact search on the scale bench's replicated rows (each of the "
              f"{rows[0].get('source_rows', '?') if rows else '?'} source rows has chunks/that many noisy copies): a "
              f"question's nearest chunks are mostly copies of the same few rows, their cosines close together, "
              f"a harder case for HNSW than distinct chunks.", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog=COMMAND, description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="100000,250000", help="chunks per run, comma-separated")
    ap.add_argument("--questions", type=int, default=500)
    ap.add_argument("--out", default=OUT, help="the JSON rows; the table goes beside it (.md)")
    a = ap.parse_args(argv)
    sizes = [int(s) for s in a.sizes.split(",") if s.strip()]
    from bench.scale_data import _Source, make_source_rows
    from configs.schema import load_config
    hnsw = load_config(None).artifacts.hnsw
    src = _Source(make_source_rows())
    _, qv = real_questions(a.questions)
    os.makedirs(WORK, exist_ok=True)
    rows = []
    for n in sizes:
        t = time.perf_counter()
        vectors = scale_vectors(src, n)
        _log(f"ann_vs_exact: {n} vectors made in {time.perf_counter() - t:.1f} s")
        rows.append({**measure(vectors, qv, hnsw, os.path.join(WORK, f"hnsw-{n}.duckdb")),
                     "source_rows": src.n})
        del vectors
        _log(json.dumps(rows[-1]))
    command = " ".join([COMMAND, *(argv if argv is not None else sys.argv[1:])])
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w", encoding="utf-8") as f:
        json.dump(rows, f, indent=2)
        f.write("\n")
    with open(os.path.splitext(a.out)[0] + ".md", "w", encoding="utf-8") as f:
        f.write(table(rows, command))
    print(json.dumps(rows), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
