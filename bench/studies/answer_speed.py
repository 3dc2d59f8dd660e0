"""Answer-path throughput against retrieval-only, measured in one run on the same questions.

    python -m bench.studies.answer_speed --index out/new/cranfield/index --questions /work/shared/data/cranfield/queries.jsonl
        [--dedupe-qrels QRELS] [--legacy N] [--profile]

Per question set, with the default config and the engine opened once:
  embed      question embedding alone
  retrieve   QAEngine.retrieve (embedding + dense + BM25 + fusion + candidate rows)
  answer     QAEngine.answer_batch (the above + reranker none + extractive answer), i.e. the
             answer job's per-batch work
  legacy     the same with the old answerer (sentences embedded at answer time, a fresh
             sentence cache, like a job whose questions touch distinct chunks), first N questions
Each stage is run twice, alternating, and the faster pass counts (the machine is shared).
--dedupe-qrels keeps one question per gold document (questions touching distinct chunks).
"""
from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import time


def load_questions(path: str, dedupe_qrels: str | None, limit: int | None):
    from transforms.query.records import Question
    from transforms.query.questions.read import read_questions
    qs = [q for q in read_questions(path) if isinstance(q, Question)]
    if dedupe_qrels:
        from pipelines.eval import read_qrels
        rels = read_qrels(dedupe_qrels)
        seen, keep = set(), []
        for q in qs:
            docs = tuple(sorted(d for d, g in rels.get(q.id, {}).items() if g > 0))
            if docs and docs not in seen:
                seen.add(docs)
                keep.append(q)
        qs = keep
    return qs[:limit] if limit else qs


def main(argv=None) -> None:
    from configs.schema import load_config
    from transforms.ingest.embed import model_spec_from_config
    from transforms.index.publish import resolve_index
    from transforms.query.engine import QAEngine

    ap = argparse.ArgumentParser()
    ap.add_argument("--index", required=True)
    ap.add_argument("--questions", required=True)
    ap.add_argument("--dedupe-qrels", default=None)
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--config", default=None)
    ap.add_argument("--legacy", type=int, default=0, help="also time the old answerer on this many questions")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--label", default="")
    args = ap.parse_args(argv)
    cfg = load_config(args.config)
    spec = model_spec_from_config(cfg)
    t = time.perf_counter()
    eng = QAEngine(resolve_index(args.index), cfg, spec)
    open_s = time.perf_counter() - t
    qs = load_questions(args.questions, args.dedupe_qrels, args.limit)
    bs = args.batch

    def batches():
        for i in range(0, len(qs), bs):
            yield qs[i:i + bs]

    def t_embed():
        for b in batches():
            eng.embedder.encode_queries([q.question for q in b])

    def t_retrieve():
        for b in batches():
            eng.retrieve(b)

    def t_answer():
        for b in batches():
            eng.answer_batch(b, cfg.output.retrieved_top_k)

    best = {}
    eng.answer_batch(qs[:8], 10)  # warm-up (onnxruntime arena, stems)
    for _ in range(2):
        for name, fn in (("embed", t_embed), ("retrieve", t_retrieve), ("answer", t_answer)):
            t = time.perf_counter()
            fn()
            best[name] = min(best.get(name, 1e9), time.perf_counter() - t)
    # chunks: the live ones (what the artifact held); the stores: the segments' sentence arrays
    # (SentenceStore.nbytes: vectors, spans, pointers) and display rows (ChunkTable.nbytes), which
    # are memory-mapped now rather than loaded at open
    segs = [s.seg for s in eng.searchers]
    sent_bytes = sum(g.sent_vec.nbytes + g.sent_start.nbytes + g.sent_end.nbytes + g.sent_ptr.nbytes for g in segs)
    out = {"label": args.label, "questions": len(qs), "chunks": int(sum(int(s.live.sum()) for s in eng.searchers)),
           "open_s": round(open_s, 2),
           "sentence_store_mb": round(sent_bytes / 1e6, 1),
           "chunk_table_mb": round(sum(g.rows.nbytes for g in segs) / 1e6, 1)}
    for k, v in best.items():
        out[f"{k}_qps"] = round(len(qs) / v, 1)
    out["answer_over_retrieve"] = round(best["retrieve"] / best["answer"], 3)
    if args.legacy:
        from transforms.query.answer import ExtractiveAnswerer
        from transforms.query.rerank import VectorCache
        sub = qs[:args.legacy]
        legacy = ExtractiveAnswerer(eng.embedder, max_sentences=3, threshold=0.55, top_chunks=5)
        t = time.perf_counter()
        for i in range(0, len(sub), bs):
            b = sub[i:i + bs]
            cands = eng.retrieve(b)
            legacy.answer([q.question for q in b], cands, cache=VectorCache())
        out["legacy_answer_qps"] = round(len(sub) / (time.perf_counter() - t), 1)
    if args.profile:
        pr = cProfile.Profile()
        pr.enable()
        t_answer()
        pr.disable()
        s = io.StringIO()
        pstats.Stats(pr, stream=s).sort_stats("cumulative").print_stats(25)
        print(s.getvalue())
    print(json.dumps(out), flush=True)
    eng.close()


if __name__ == "__main__":
    main()
