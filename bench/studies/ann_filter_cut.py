"""Where should a filtered ANN search go exact? (transforms/query/segment_search.py ANN_EXACT_BELOW)

    python -m bench.search_bench --chunks 1000000 --ann 128      # builds the -hnsw index, embeds questions
    OPENBLAS_NUM_THREADS=1 python -m bench.studies.ann_filter_cut [--ef 64]

On the first segment of the realistic 1M search_bench index built with index.ann hnsw: per share
of rows allowed (random masks), 256 of its questions, the CPU per question of the exact product
over the allowed rows against the HNSW walk with a bitmap selector, and the walk's recall@10
against the exact top 10 of the allowed rows.
"""
from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np


def main(argv=None) -> int:
    from bench.search_bench import WORK
    from transforms.index.segments import Segment
    from transforms.query import segment_search
    from transforms.query.retrieve import top_rows
    ap = argparse.ArgumentParser(prog="python -m bench.studies.ann_filter_cut", description=__doc__.splitlines()[0])
    ap.add_argument("--index", default=os.path.join(WORK, "realistic-1000000-250000-hnsw"))
    ap.add_argument("--ef", type=int, default=64)
    ap.add_argument("--questions", type=int, default=256)
    a = ap.parse_args(argv)
    root = os.path.join(a.index, "segments")
    seg = Segment(os.path.join(root, sorted(d for d in os.listdir(root) if "." not in d)[0]))
    qv = np.load(sorted(os.path.join(WORK, f) for f in os.listdir(WORK) if f.startswith("qvecs"))[0])
    q = (qv / np.linalg.norm(qv, axis=1, keepdims=True)).astype(np.float32)[:a.questions]
    s = segment_search.SegmentSearcher(seg, 0, np.ones(10 ** 7), np.zeros(0, np.int64), seg.n, 10.0,
                                       ann_ef_search=a.ef)
    s.ann_graph()
    v = np.asarray(seg.vectors)
    rng = np.random.default_rng(0)
    runs = []
    for f in (1.0, 0.5, 0.2, 0.1, 0.05, 0.02):
        m = rng.random(seg.n) < f if f < 1 else np.ones(seg.n, bool)
        keep = np.flatnonzero(m)
        t = time.process_time()
        for lo in range(0, len(q), 64):
            keep[top_rows(q[lo:lo + 64] @ v[keep].T, 58)]
        exact_ms = (time.process_time() - t) * 1000 / len(q)
        truth = keep[np.argsort(-(q @ v[keep].T), axis=1)[:, :10]]
        cut, segment_search.ANN_EXACT_BELOW = segment_search.ANN_EXACT_BELOW, 0.0  # the walk at every share
        t = time.process_time()
        got = np.concatenate([s.dense_ann(q[lo:lo + 64], 58, m, np.flatnonzero(~m)) for lo in range(0, len(q), 64)])
        walk_ms = (time.process_time() - t) * 1000 / len(q)
        segment_search.ANN_EXACT_BELOW = cut
        rec = []
        for j in range(len(q)):
            r = got[j][got[j] >= 0]
            rec.append(len(set(r[np.argsort(-(v[r] @ q[j]))[:10]]) & set(truth[j])) / 10)
        runs.append({"allowed": f, "exact_subset_cpu_ms": round(exact_ms, 3), "hnsw_walk_cpu_ms": round(walk_ms, 3),
                     "hnsw_recall_at_10": round(float(np.mean(rec)), 4)})
        print(json.dumps(runs[-1]), flush=True)
    print(json.dumps({"segment": seg.id, "chunks": seg.n, "ef_search": a.ef, "runs": runs}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
