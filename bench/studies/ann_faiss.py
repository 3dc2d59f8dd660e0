"""Would approximate search pay? faiss HNSW against exact search on one segment.

    (faiss-cpu is a ragbeam dependency now; index.ann: hnsw builds the graph with each segment)
    python -m bench.studies.ann_faiss [--index DIR] [--segment 0]

On one segment of a search_bench index (default: its 1M-chunk one, 250k a segment): the
HNSW build CPU (M 32, efConstruction 80, one thread), then per efSearch the search CPU per
question for the top 58 (dense_top_n + MARGIN) and recall@10 against the exact top 10. Compare
with search_bench's dense CPU per question per segment (the batched matrix product).
"""
from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np


def main(argv=None) -> int:
    import faiss
    from bench.search_bench import _cfg, _query_vectors, make_index, questions
    from transforms.index import publish
    from transforms.ingest.embed import model_spec_from_config
    from transforms.query.engine import AnswerSide
    ap = argparse.ArgumentParser(prog="python -m bench.studies.ann_faiss", description=__doc__.splitlines()[0])
    ap.add_argument("--index")
    ap.add_argument("--corpus", choices=["realistic", "copies"], default="realistic")
    ap.add_argument("--segment", type=int, default=0)
    ap.add_argument("--questions", type=int, default=500)
    ap.add_argument("--ef", default="64,128,256,512,1024")
    a = ap.parse_args(argv)
    cfg = _cfg(250_000)
    idx = a.index or make_index(1_000_000, 250_000, a.corpus)
    side = AnswerSide(publish.resolve_index(idx), cfg, model_spec_from_config(cfg))
    qfile = os.path.join(idx, "questions.jsonl")
    texts = questions(a.questions, qfile if os.path.exists(qfile) else None)
    qv = _query_vectors(side, texts)
    q = (qv / np.linalg.norm(qv, axis=1, keepdims=True)).astype(np.float32)
    v = np.ascontiguousarray(np.asarray(side.segments.segment(a.segment).vectors), dtype=np.float32)
    exact = np.argsort(-(q @ v.T), axis=1)[:, :10]
    faiss.omp_set_num_threads(1)
    t = time.process_time()
    idx = faiss.IndexHNSWFlat(v.shape[1], 32, faiss.METRIC_INNER_PRODUCT)
    idx.hnsw.efConstruction = 80
    idx.add(v)
    out = {"chunks": len(v), "hnsw_build_cpu_s": round(time.process_time() - t, 1), "runs": []}
    for ef in (int(x) for x in a.ef.split(",")):
        idx.hnsw.efSearch = ef
        t = time.process_time()
        _, got = idx.search(q, 58)
        ms = (time.process_time() - t) * 1000 / len(q)
        recall = float(np.mean([len(set(got[j, :10]) & set(exact[j])) / 10 for j in range(len(q))]))
        out["runs"].append({"ef_search": ef, "cpu_ms_per_question": round(ms, 3), "recall_at_10": round(recall, 4)})
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
