"""First-stage fusion variants on every dev set, scored like `ragbeam eval` (document nDCG@10).

    python -m bench.studies.fusion_variants --sets cranfield,vaswani,msmarco,squad [--root out/eval]

For each set, the index built by `ragbeam eval` (ROOT/<set>/index) is opened once; dense
and BM25 run over every judged query (depth 200 like the eval), and each variant fuses
the same lists:
  rrf            today's hybrid (k=60, equal weights)
  cc-<norm>-a    convex combination a*dense + (1-a)*bm25 of per-query normalised scores,
                 norm = minmax (over each retriever's own top-N) | zscore | max (divide by the max)
Scores of a chunk that one retriever did not return in its top-N are filled with its
exact score (dense: cosine; BM25: the sparse sum), so the union is scored on both sides.
BM25 k1/b variants reweigh every segment's postings with other parameters (the same segments
and corpus-wide statistics, bench.studies.segview.searchers_with_bm25).
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np

from bench.studies.devsets import add_dev_set_args, append_rows, iter_dev_sets
from transforms.evaluation import metrics as M
from transforms.query.fuse import rrf_fuse
from transforms.query.fuse import convex_fuse

DEPTH = 200


def main(argv=None) -> None:
    from configs.schema import load_config
    from bench.studies.segview import as_arrays, exact_fill, first_stage, searchers_with_bm25

    ap = argparse.ArgumentParser()
    add_dev_set_args(ap, "cranfield,vaswani,msmarco,squad", "out/bench/fusion_variants.jsonl")
    ap.add_argument("--top-n", type=int, default=50, help="per-retriever depth fused (production: 50)")
    args = ap.parse_args(argv)
    cfg = load_config(None)
    # the engine's own BM25 parameters (engine.open_searcher)
    own_k1, own_b = float(cfg.retrieve.bm25_k1 or 1.2), float(cfg.retrieve.bm25_b or 0.75)
    rows = []
    for name, ev, ids, qrels, texts in iter_dev_sets(args, cfg):
        t = time.perf_counter()
        e = ev.engine
        qv = e.embedder.encode_queries(texts)
        allowed = ev.public
        first = first_stage(e, texts, qv, DEPTH, allowed)  # dense and BM25, DEPTH deep
        print(f"{name}: {len(ids)} queries, {e.segments.n} chunks, first stage {time.perf_counter() - t:.1f}s",
              flush=True)

        def ndcg(rankings):
            return float(np.mean([M.ndcg_at_k(ev.docs(r), qr, 10) for r, qr in zip(rankings, qrels)]))

        def record(variant, rankings, **extra):
            row = {"set": name, "variant": variant, "ndcg@10": ndcg(rankings), **extra}
            rows.append(row)
            print(json.dumps(row), flush=True)

        dense_rank = [[c for c, _ in r.dense] for r in first]
        record("dense", dense_rank)
        for k1, b in ((None, None), (0.9, 0.4), (1.2, 0.4), (1.5, 0.75), (0.9, 0.75)):
            # the same dense lists either way; BM25 under these k1/b
            lists = first if k1 is None else first_stage(e, texts, qv, DEPTH, allowed,
                                                          searchers_with_bm25(e, k1, b))
            tag = f"k1={own_k1 if k1 is None else float(k1)},b={own_b if b is None else float(b)}"
            bm_rank = [[c for c, _ in r.bm25] for r in lists]
            record("bm25", bm_rank, bm25=tag)
            N = args.top_n
            record("rrf", [[c for c, _ in rrf_fuse({"dense": dr[:N], "bm25": br[:N]}, k=60)]
                           for dr, br in zip(dense_rank, bm_rank)], bm25=tag)
            if k1 is not None and (k1, b) != (0.9, 0.4):
                continue  # convex variants on the index's own and on bm25s's parameters only
            arrays = [(as_arrays(r.dense), as_arrays(r.bm25)) for r in lists]
            for norm in ("minmax", "zscore", "max"):
                for fill in ("exact", "floor"):
                    if fill == "floor" and norm != "minmax":
                        continue
                    for a in (0.3, 0.4, 0.5, 0.6, 0.7):
                        rankings = []
                        for r, ((d_i, d_s), (b_i, b_s)) in zip(lists, arrays):
                            # exact fill: every chunk of either list has both scores (cos_of, bm25_of)
                            fused = convex_fuse(d_i[:N], d_s[:N], b_i[:N], b_s[:N], alpha=a, norm=norm,
                                                dense_fill=exact_fill(r.cos_of) if fill == "exact" else None,
                                                bm25_fill=exact_fill(r.bm25_of) if fill == "exact" else None)
                            rankings.append([c for c, _ in fused])
                        record(f"cc-{norm}-{fill}-{a}", rankings, bm25=tag, alpha=a, norm=norm, fill=fill)
        ev.close()
    append_rows(args.out, rows)


if __name__ == "__main__":
    main()


def table(path: str = "out/bench/fusion_variants.jsonl") -> str:
    """Markdown: one row per (variant, BM25 parameters), one column per set, best single retriever marked."""
    rows = [json.loads(line) for line in open(path)]
    sets = list(dict.fromkeys(r["set"] for r in rows))
    keys = list(dict.fromkeys((r["variant"], r.get("bm25", "")) for r in rows))
    val = {(r["set"], r["variant"], r.get("bm25", "")): r["ndcg@10"] for r in rows}
    best_single = {s: max(v for (s2, var, _), v in val.items() if s2 == s and var in ("dense", "bm25")) for s in sets}
    out = ["| variant | BM25 | " + " | ".join(sets) + " | min margin vs best single |",
           "|---|---|" + "---:|" * (len(sets) + 1)]
    for var, bm in keys:
        cells, margins = [], []
        for s in sets:
            v = val.get((s, var, bm))
            cells.append("-" if v is None else f"{v:.4f}")
            if v is not None:
                margins.append(v - best_single[s])
        out.append(f"| {var} | {bm} | " + " | ".join(cells) + f" | {min(margins):+.4f} |")
    return "\n".join(out)


if __name__ == "__main__" and False:
    pass
