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
BM25 k1/b variants reload the postings with other parameters (same artifact).
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
    from transforms.query.retrieve import BM25Index

    ap = argparse.ArgumentParser()
    add_dev_set_args(ap, "cranfield,vaswani,msmarco,squad", "out/fusion_variants.jsonl")
    ap.add_argument("--top-n", type=int, default=50, help="per-retriever depth fused (production: 50)")
    args = ap.parse_args(argv)
    cfg = load_config(None)
    rows = []
    for name, ev, ids, qrels, texts in iter_dev_sets(args, cfg):
        t = time.perf_counter()
        qv = ev.engine.embedder.encode_queries(texts)
        allowed = ev.public
        d_s, d_i = ev.engine.dense.search(qv, DEPTH, allowed)
        mat = ev.engine.dense.matrix
        print(f"{name}: {len(ids)} queries, {mat.shape[0]} chunks, dense {time.perf_counter() - t:.1f}s", flush=True)

        def ndcg(rankings):
            return float(np.mean([M.ndcg_at_k(ev.docs(r), qr, 10) for r, qr in zip(rankings, qrels)]))

        def record(variant, rankings, **extra):
            row = {"set": name, "variant": variant, "ndcg@10": ndcg(rankings), **extra}
            rows.append(row)
            print(json.dumps(row), flush=True)

        dense_rank = [[int(c) for c in d_i[j] if c >= 0] for j in range(len(ids))]
        record("dense", dense_rank)
        for k1, b in ((None, None), (0.9, 0.4), (1.2, 0.4), (1.5, 0.75), (0.9, 0.75)):
            bm = ev.engine.bm25 if k1 is None else BM25Index(ev.engine.con, k1=k1, b=b)
            tag = f"k1={bm.k1},b={bm.b}"
            b_s, b_i = bm.search(texts, DEPTH, allowed)
            q_of, docs_all, s_all = bm.scores(texts)
            bounds = np.searchsorted(q_of, np.arange(len(texts) + 1))
            bm_rank = [[int(c) for c in b_i[j] if c >= 0] for j in range(len(ids))]
            record("bm25", bm_rank, bm25=tag)
            N = args.top_n
            record("rrf", [[c for c, _ in rrf_fuse({"dense": dr[:N], "bm25": br[:N]}, k=60)]
                           for dr, br in zip(dense_rank, bm_rank)], bm25=tag)
            if k1 is not None and (k1, b) != (0.9, 0.4):
                continue  # convex variants on the artifact's own and on bm25s's parameters only
            for norm in ("minmax", "zscore", "max"):
                for fill in ("exact", "floor"):
                    if fill == "floor" and norm != "minmax":
                        continue
                    for a in (0.3, 0.4, 0.5, 0.6, 0.7):
                        rankings = []
                        for j in range(len(ids)):
                            sp_docs, sp_s = docs_all[bounds[j]:bounds[j + 1]], s_all[bounds[j]:bounds[j + 1]]

                            def bfill(c, sp_docs=sp_docs, sp_s=sp_s):
                                if not len(sp_docs):
                                    return np.zeros(len(c))
                                pos = np.clip(np.searchsorted(sp_docs, c), 0, len(sp_docs) - 1)
                                return np.where(sp_docs[pos] == c, sp_s[pos], 0.0)

                            def dfill(c, j=j):
                                return mat[c] @ qv[j]

                            fused = convex_fuse(d_i[j][:N], d_s[j][:N], b_i[j][:N], b_s[j][:N], alpha=a, norm=norm,
                                                dense_fill=dfill if fill == "exact" else None,
                                                bm25_fill=bfill if fill == "exact" else None)
                            rankings.append([c for c, _ in fused])
                        record(f"cc-{norm}-{fill}-{a}", rankings, bm25=tag, alpha=a, norm=norm, fill=fill)
        ev.close()
    append_rows(args.out, rows)


if __name__ == "__main__":
    main()


def table(path: str = "out/fusion_variants.jsonl") -> str:
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
