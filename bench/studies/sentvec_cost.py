"""Index-time cost of sentence vectors: chunks/s for chunk vectors only (today), late chunking
(same forward pass, sentence spans pooled) and separate sentence embedding, on the same chunks.

    python -m bench.studies.sentvec_cost --index out/base/squad/index [--n 200] [--rounds 2]

Passes alternate (base, late, separate, base, ...) and the fastest of each counts: the
machine is shared, so only ratios measured this way mean anything.
"""
from __future__ import annotations

import argparse
import json
import time


def first_chunks(version_dir: str, n: int) -> list[tuple]:
    """(context, text) of the version's first n live chunks in chunk-number order, read from its
    segments (what `SELECT context, text FROM chunks ORDER BY chunk_no LIMIT n` gave on the
    pre-segment index.duckdb, which held live chunks only)."""
    import numpy as np

    from transforms.common import storage
    from transforms.query.version_segments import VersionSegments

    vs = VersionSegments(version_dir, json.loads(storage.read_text(storage.join(version_dir, "manifest.json"))))
    out: list[tuple] = []
    for i in range(len(vs)):
        if len(out) >= n:
            break
        seg, (_, dead) = vs.segment(i), vs.stats(i)
        live = np.setdiff1d(np.arange(seg.n), np.asarray(dead, np.int64))[:n - len(out)]
        t = seg.rows.select(["context", "text"]).take(live)
        out += list(zip(t.column("context").to_pylist(), t.column("text").to_pylist()))
    return out


def main(argv=None) -> None:
    from configs.schema import load_config
    from transforms.ingest.embed import Embedder, model_spec_from_config
    from transforms.index.publish import resolve_index
    from transforms.ingest.sentvec import chunk_sentence_vectors

    ap = argparse.ArgumentParser()
    ap.add_argument("--index", required=True)
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args(argv)
    cfg = load_config(None)
    emb = Embedder(model_spec_from_config(cfg))
    rows = first_chunks(resolve_index(args.index), args.n)
    texts = [t or "" for _, t in rows]
    ets = [f"{c}\n{t}" if c else t for c, t in rows]
    bs = cfg.embed.batch_size
    fns = {"chunk_only": lambda: emb.encode(ets, batch_size=bs),
           "late": lambda: chunk_sentence_vectors(emb, ets, texts, bs, kind="late"),
           "separate": lambda: chunk_sentence_vectors(emb, ets, texts, bs, kind="separate")}
    best = {}
    for _ in range(args.rounds):
        for k, fn in fns.items():
            t = time.perf_counter()
            fn()
            best[k] = min(best.get(k, 1e9), time.perf_counter() - t)
    out = {k: round(len(ets) / v, 2) for k, v in best.items()}
    out.update({f"{k}_vs_chunk_only": round(best["chunk_only"] / v, 3) for k, v in best.items()})
    _, spans, _ = chunk_sentence_vectors(emb, ets[:1], texts[:1], bs, kind="late")
    from transforms.ingest.sentvec import sentence_spans
    out["sentences_per_chunk"] = round(sum(len(sentence_spans(t)) for t in texts) / len(texts), 2)
    print(json.dumps({"chunks": len(ets), "chunks_per_s": out}), flush=True)


if __name__ == "__main__":
    main()
