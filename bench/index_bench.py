"""1. Index throughput: the Beam index job vs a bare onnxruntime loop over the same chunk texts."""
from __future__ import annotations

import os

from bench.common import chunk_embed_texts, quiet, timed
from bench.data import Dataset, write_corpus
from bench.table import Figure, Report

SECTION = "1. Index throughput"


def bench_index(cfg, data: Dataset, n_docs: int, work: str, report: Report) -> dict:
    from pipelines.index import run_index
    from transforms.ingest.embed import Embedder, model_spec_from_config
    from transforms.index.publish import resolve_index

    corpus = write_corpus(data.take(n_docs), os.path.join(work, "corpus-index"))
    index_dir = os.path.join(work, "index")  # fresh: no embedding cache to hit
    s = run_index(cfg, corpus, index_dir, progress=False, log=quiet)
    version_dir = resolve_index(index_dir)
    if s.get("cache_hits"):
        raise RuntimeError(f"index bench hit the embedding cache ({s['cache_hits']} chunks): not a fresh index")

    texts = chunk_embed_texts(version_dir)
    spec = model_spec_from_config(cfg)
    embedder = Embedder(spec)
    embedder.encode(texts[:8], batch_size=cfg.embed.batch_size)  # warm-up, as the pipeline's setup() loads once
    with timed() as bare:
        embedder.encode(texts, batch_size=cfg.embed.batch_size)

    docs = s["documents"]
    pipe_rate = s["embedded"] / s["pipeline_s"]
    bare_rate = len(texts) / bare.s
    report.add(Figure(SECTION, f"chunks embedded/s, index pipeline ({s['embedded']} chunks)", pipe_rate,
                      "chunks/s", bare_rate, f"Embedder.encode over the same {len(texts)} chunk texts, "
                      f"batch {cfg.embed.batch_size}", note="pipeline time includes read, parse, chunk, "
                      "model load and Parquet writes"))
    report.add(Figure(SECTION, f"documents/s end to end, run_index wall ({docs} docs)", docs / s["wall_s"],
                      "docs/s", docs / bare.s, "the same docs if only embedding took time",
                      note="wall includes the segment build and publish"))
    report.add(Figure(SECTION, "run_index wall", s["wall_s"], "s", bare.s, "bare embedding of its chunks",
                      note=f"pipeline {s['pipeline_s']:.1f} s + segments {s['artifact'].get('build_s', 0):.1f} s "
                           "+ publish"))
    return {"index_dir": index_dir, "version_dir": version_dir, "summary": s, "chunk_texts": texts,
            "embedder": embedder, "bare_embed_s": bare.s}
