"""Score-aware fusion variants that need no per-set weight, on every dev set index.

    python -m bench.studies.fusion_adaptive [--sets cranfield,vaswani,msmarco,squad,debian-docs] [--root out/eval]
        [--out out/bench/fusion_adaptive.jsonl] [--summary bench/results/fusion_adaptive.json]

Like bench.studies.fusion_variants (same depth, same scoring), with BM25 scaled by an absolute bound
instead of (or besides) its per-query min-max:
  ub          the query's BM25 bound (the first stage's bm25_bound, segment_search.gather: each
              known term's highest posting weight over the live chunks, plus a once-seen term's
              weight for each term the index lacks)
  cc-a        today's: a*minmax(dense) + (1-a)*minmax(bm25)
  ccub-a      a*minmax(dense) + (1-a)*conf*minmax(bm25), conf = top bm25 / ub (BM25 counts as
              much as its best match covers the query's terms)
  abs-a       a*cos + (1-a)*bm25/ub
  *-docagg-b  documents ranked by their best chunk + b x their second-best (the engine: b = 0)
Every row goes to --out (appended); --summary holds the grid a set a line and each variant's
worst margin over the set's better single retriever (the pick: the largest).
"""
from __future__ import annotations

import argparse
import json

import numpy as np

from bench.jsonfile import write_json
from bench.studies.devsets import DEV_SETS, add_dev_set_args, append_rows, iter_dev_sets
from transforms.evaluation import metrics as M
from transforms.query.fuse import _scores_on, _valid, normalise

# the dev sets, plus the extra indexes the near-duplicate comparison scores (ROOT/<name>/index)
SETS = {**DEV_SETS, "msmarco-off": DEV_SETS["msmarco"], "debian-docs-off": DEV_SETS["debian-docs"]}


def main(argv=None) -> None:
    from configs.schema import load_config
    from bench.studies.segview import as_arrays, exact_fill, first_stage

    ap = argparse.ArgumentParser()
    add_dev_set_args(ap, "cranfield,vaswani,msmarco,squad,debian-docs", "out/bench/fusion_adaptive.jsonl")
    ap.add_argument("--summary", default="bench/results/fusion_adaptive.json", help="from every row in --out")
    args = ap.parse_args(argv)
    cfg = load_config(None)
    N = cfg.retrieve.dense_top_n
    rows = []
    for name, ev, ids, qrels, texts in iter_dev_sets(args, cfg, SETS):
        e = ev.engine
        qv = e.embedder.encode_queries(texts)
        qv = qv / np.linalg.norm(qv, axis=1, keepdims=True)
        first = first_stage(e, texts, qv, N, ev.public)  # dense and BM25 top N, bounds, exact scores
        dense = [as_arrays(r.dense) for r in first]
        bm25 = [as_arrays(r.bm25) for r in first]

        def ranking(j, how, a):
            di, ds_ = _valid(*dense[j])
            bi, bs = _valid(*bm25[j])
            union = np.union1d(di, bi)
            if not len(union):
                return []
            nd = _scores_on(union, di, ds_, exact_fill(first[j].cos_of))
            nb = _scores_on(union, bi, bs, exact_fill(first[j].bm25_of))
            bound = first[j].bm25_bound or 0.0
            ub = float(bound) if bound > 0 else 1.0
            if how == "cc":
                f = a * normalise(nd, ds_) + (1 - a) * normalise(nb, bs)
            elif how == "ccub":
                conf = (bs.max() / ub) if len(bs) and ub > 0 else 0.0
                f = a * normalise(nd, ds_) + (1 - a) * conf * normalise(nb, bs)
            elif how == "abs":
                f = a * nd + (1 - a) * nb / max(ub, 1e-9)
            order = np.lexsort((union, -np.round(f, 12)))
            return [(int(union[i]), float(f[i])) for i in order]

        doc_of = e.doc_ids

        def by_doc(fused, beta):
            """Document order by best chunk + beta x second-best chunk (beta 0: the engine's)."""
            best: dict = {}
            for c, sc in fused:
                best.setdefault(doc_of[c], []).append((sc, c))
            agg = sorted(best.values(), key=lambda v: -(v[0][0] + beta * (v[1][0] if len(v) > 1 else 0.0)))
            return [v[0][1] for v in agg]

        def ndcg(rankings):
            return float(np.mean([M.ndcg_at_k(ev.docs(r), qr, 10) for r, qr in zip(rankings, qrels)]))

        def record(variant, rankings):
            row = {"set": name, "variant": variant, "ndcg@10": round(ndcg(rankings), 4)}
            rows.append(row)
            print(json.dumps(row), flush=True)
        record("dense", [[c for c, _ in r.dense] for r in first])
        record("bm25", [[c for c, _ in r.bm25] for r in first])
        for how in ("cc", "ccub", "abs"):
            for a in ((0.6, 0.7, 0.8) if how != "abs" else (0.7, 0.75, 0.78, 0.8, 0.82, 0.85, 0.9, 0.95)):
                fused = [ranking(j, how, a) for j in range(len(ids))]
                record(f"{how}-{a}", [[c for c, _ in f] for f in fused])
                if (how, a) in (("cc", 0.7), ("abs", 0.8)):
                    for beta in (0.1, 0.25, 0.5):
                        record(f"{how}-{a}-docagg-{beta}", [by_doc(f, beta) for f in fused])
        ev.close()
    append_rows(args.out, rows)
    with open(args.out, encoding="utf-8") as f:
        write_json(args.summary, summary([json.loads(x) for x in f if x.strip()]))


def summary(rows: list[dict]) -> dict:
    """nDCG@10 per set and variant, and each fused variant's worst margin over the sets."""
    table: dict = {}
    for r in rows:
        table.setdefault(r["set"], {})[r["variant"]] = r["ndcg@10"]
    fused = {v for t in table.values() for v in t} - {"dense", "bm25"}
    worst = {v: round(min(t[v] - max(t["dense"], t["bm25"]) for t in table.values() if v in t), 4)
             for v in sorted(fused)}
    return {"pick": max(worst, key=worst.get), "worst_margin": worst, "ndcg@10": table}


if __name__ == "__main__":
    main()
