"""Fusion refitted per embedding model, on tune splits only, scored on held-out queries.

    RAGBEAM__EMBED__PROFILE=<p> python -m bench.studies.fusion_refit --root out/eval-<p> \
        [--sets squad,msmarco,vaswani] [--out out/bench/fusion_refit.jsonl] [--summary bench/results/fusion_refit.json]

The first-stage fusion (retrieve.fusion_alpha 0.82, fusion_norm bound) was fitted on MiniLM's
cosines. A model whose cosines sit on another scale (e5's are all high) gets another effective
weight from the same alpha. Here every variant is scored per set on two disjoint query splits:
  tune  SQuAD: the 500 dev-half questions outside the eval sample (devsets.squad_samples);
        other sets: the queries whose id hashes even (they have no tune split of their own)
  test  SQuAD: the eval sample; other sets: the rest
Variants (each retriever's top retrieve.dense_top_n / bm25_top_n, exact scores filled in, as
QAEngine.fuse):
  dense, bm25         one retriever alone
  bound-a             today's: a*cos + (1-a)*bm25/ub (ub: the query's best possible BM25)
  floor-a             a*(cos-f)/(1-f) + (1-a)*bm25/ub, f: the cosine of the query's last
                      dense hit (no labels: the model's own cosine scale, per query)
  *-cover-lo-hi       query-adaptive: a = hi - (hi-lo)*c, c = BM25's best hit over ub (how much
                      of the query the best lexical match covers; no labels)
  *-margin-lo-hi      query-adaptive: a = lo + (hi-lo)*min(1, m/0.2), m = dense's lead of its 1st hit
                      over its 10th, on the floor scale (how sure the dense side is; no labels)
A fit picks, on tune only, the variant whose worst set (nDCG@10 minus the best single
retriever's) is best; its test figures are the ones to report. Every row goes to --out (appended,
every profile's); the fits and the test figures docs/models.md shows to --summary.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os

import numpy as np

from bench.studies.devsets import DATA_ROOT, DEV_SETS, append_rows, squad_samples
from transforms.evaluation import metrics as M
from transforms.query.fuse import _valid, convex_fuse

ALPHAS = (0.5, 0.6, 0.7, 0.75, 0.8, 0.82, 0.85, 0.9, 0.95)
COVER_LO = (0.3, 0.4, 0.5, 0.6, 0.7)
COVER_HI = (0.8, 0.85, 0.9, 0.95, 1.0)


def splits(name: str, ds) -> dict[str, list[str]]:
    """tune / test query ids of one dev set (see the module doc)."""
    from transforms.evaluation.datasets import sample_ids
    if name == "squad":
        test, tune = squad_samples(ds)
        return {"tune": tune, "test": test}
    ids = sample_ids(ds.queries, DEV_SETS[name][1], 0)
    even = [q for q in ids if int(hashlib.sha256(q.encode()).hexdigest(), 16) % 2 == 0]
    return {"tune": even, "test": [q for q in ids if q not in set(even)]}


def fused(first, how: str, a, nd: int, nb: int) -> list[int]:
    """One query's fused chunk order: through fuse.convex_fuse (the engine's) for fixed and
    margin weights; the cover weight is computed here."""
    from bench.studies.segview import as_arrays, exact_fill
    d_ids, d_s = [x[:nd] for x in as_arrays(first.dense)]
    b_ids, b_s = [x[:nb] for x in as_arrays(first.bm25)]
    alpha_min = None
    if isinstance(a, tuple) and a[0] == "margin":  # the dense weight rises from lo to hi with dense's lead
        alpha_min, a = a[1], a[2]
    elif isinstance(a, tuple):  # (lo, hi): the dense weight falls from hi to lo as BM25's best hit covers the query
        _, bs = _valid(b_ids, b_s)
        ub = float(first.bm25_bound) if first.bm25_bound and first.bm25_bound > 0 else 1.0
        cover = float(bs.max()) / ub if len(bs) else 0.0
        a = a[1] - (a[1] - a[0]) * min(max(cover, 0.0), 1.0)
    out = convex_fuse(d_ids, d_s, b_ids, b_s, alpha=a, norm=how, alpha_min=alpha_min,
                      dense_fill=exact_fill(first.cos_of), bm25_fill=exact_fill(first.bm25_of),
                      bm25_bound=first.bm25_bound)
    return [c for c, _ in out]


def score_set(name: str, args, cfg) -> list[dict]:
    from bench.studies.segview import first_stage
    from transforms.evaluation.datasets import DocLabels, load_dataset
    from transforms.evaluation.evaluator import Evaluator
    from transforms.index.publish import resolve_index

    ds = load_dataset(os.path.join(args.data, DEV_SETS[name][0]))
    parts = splits(name, ds)
    vdir = resolve_index(os.path.join(args.root, name, "index"))
    ev = Evaluator(vdir, cfg)
    rc = cfg.retrieve
    rows = []
    try:
        for split, ids in parts.items():
            labels = DocLabels(vdir, {d for q in ids for d in ds.qrels[q]})
            qrels = [labels.doc_qrels(ds.qrels[q]) for q in ids]
            texts = [ds.queries[q] for q in ids]
            qv = ev.engine.query_vectors(texts)
            first = first_stage(ev.engine, texts, qv, max(rc.dense_top_n, rc.bm25_top_n), ev.public)

            def record(variant, rankings):
                nd = float(np.mean([M.ndcg_at_k(ev.docs(r), q, 10) for r, q in zip(rankings, qrels)]))
                rows.append({"profile": cfg.embed.profile or "minilm", "set": name, "split": split, "queries": len(ids),
                             "variant": variant, "ndcg@10": round(nd, 4)})
                print(json.dumps(rows[-1]), flush=True)
            record("dense", [[c for c, _ in r.dense] for r in first])
            record("bm25", [[c for c, _ in r.bm25] for r in first])
            for how in ("bound", "floor"):
                for a in ALPHAS:
                    record(f"{how}-{a}", [fused(r, how, a, rc.dense_top_n, rc.bm25_top_n) for r in first])
                for lo in COVER_LO:
                    for hi in COVER_HI:
                        record(f"{how}-cover-{lo}-{hi}",
                               [fused(r, how, (lo, hi), rc.dense_top_n, rc.bm25_top_n) for r in first])
                        record(f"{how}-margin-{lo}-{hi}",
                               [fused(r, how, ("margin", lo, hi), rc.dense_top_n, rc.bm25_top_n) for r in first])
    finally:
        ev.close()
    return rows


def fit(rows: list[dict]) -> dict:
    """On tune rows only: the fused variant whose worst set margin over its best single
    retriever is largest (ties: the larger mean); with its test figures."""
    def table(split):
        t: dict = {}
        for r in rows:
            if r["split"] == split:
                t.setdefault(r["set"], {})[r["variant"]] = r["ndcg@10"]
        return t
    tune, test = table("tune"), table("test")
    variants = sorted({v for s in tune.values() for v in s if v not in ("dense", "bm25")})

    def margins(t, v):
        return {s: round(t[s][v] - max(t[s]["dense"], t[s]["bm25"]), 4) for s in t}
    best = max(variants, key=lambda v: (min(margins(tune, v).values()), np.mean(list(margins(tune, v).values()))))
    return {"variant": best, "tune_margin": margins(tune, best), "test_margin": margins(test, best),
            "test_ndcg": {s: test[s][best] for s in test}}


# the fixed variants docs/models.md compares each profile's fit with
REPORTED = ("dense", "bm25", "bound-0.82", "floor-0.82", "floor-0.9")


def summary(rows: list[dict]) -> dict:
    """Per profile: its fit, and nDCG@10 on the test halves of the reported variants and the fit's."""
    out = {}
    for profile in sorted({r["profile"] for r in rows}):
        mine = [r for r in rows if r["profile"] == profile]
        f = fit(mine)
        out[profile] = {"fit": f, "test_ndcg": {v: {r["set"]: r["ndcg@10"] for r in mine
                                                    if r["split"] == "test" and r["variant"] == v}
                                                for v in REPORTED + (f["variant"],)}}
    return out


def main(argv=None) -> None:
    from configs.schema import load_config
    from bench.jsonfile import write_json
    ap = argparse.ArgumentParser()
    ap.add_argument("--sets", default="squad,msmarco,vaswani")
    ap.add_argument("--root", default="out/eval")
    ap.add_argument("--data", default=str(DATA_ROOT))
    ap.add_argument("--out", default="out/bench/fusion_refit.jsonl", help="every row, appended (not committed)")
    ap.add_argument("--summary", default="bench/results/fusion_refit.json", help="the fits, from every row in --out")
    ap.add_argument("--summary-only", action="store_true", help="rewrite --summary from --out, score nothing")
    args = ap.parse_args(argv)
    if not args.summary_only:
        cfg = load_config(None)
        rows = [r for name in args.sets.split(",") for r in score_set(name, args, cfg)]
        append_rows(args.out, rows)
        print(json.dumps({"profile": cfg.embed.profile or "minilm", "fit": fit(rows)}))
    with open(args.out, encoding="utf-8") as f:
        write_json(args.summary, summary([json.loads(x) for x in f if x.strip()]))


if __name__ == "__main__":
    main()
