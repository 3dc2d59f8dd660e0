"""2. Answer-job retrieval throughput: QAEngine vs bm25s + numpy exact search on the same chunks.

Question embedding is timed twice: counted in both sides (same Embedder), and
excluded from both (vectors computed once up front and looked up).
"""
from __future__ import annotations

import os

import numpy as np

from bench.common import quiet, timed
from bench.data import write_questions
from bench.table import Figure, Report

SECTION = "2. Answer-job retrieval"


class LookupEmbedder:
    """Stands in for Embedder.encode with precomputed vectors: takes embedding out of a timing."""

    def __init__(self, texts: list[str], vectors: np.ndarray):
        self.row = {t: i for i, t in enumerate(texts)}
        self.vectors = vectors

    def encode(self, texts, batch_size: int = 32) -> np.ndarray:
        return self.vectors[[self.row[t] for t in texts]]

    encode_queries = encode  # the vectors were computed with the query prefix already


class Bm25NumpyBaseline:
    """The plain way: bm25s (k1=0.9, b=0.4, English stop words) + a numpy matmul, fused by RRF."""

    def __init__(self, texts: list[str], matrix: np.ndarray, embedder, k1: float = 0.9, b: float = 0.4):
        import logging

        import bm25s

        logging.getLogger("bm25s").setLevel(logging.WARNING)  # it logs every index build at DEBUG
        self.bm25s = bm25s
        self.texts, self.matrix, self.embedder = texts, matrix, embedder
        self.retriever = bm25s.BM25(k1=k1, b=b)
        self.retriever.index(bm25s.tokenize(texts, stopwords="en", show_progress=False), show_progress=False)

    def retrieve(self, questions: list[str], dense_n: int, bm25_n: int, fused_n: int, rrf_k: int) -> list[list[str]]:
        q = self.embedder.encode_queries(questions)
        scores = q @ self.matrix.T
        k = min(dense_n, scores.shape[1])
        top = np.argpartition(-scores, k - 1, axis=1)[:, :k]
        top = np.take_along_axis(top, np.argsort(-np.take_along_axis(scores, top, 1), axis=1), 1)
        toks = self.bm25s.tokenize(questions, stopwords="en", return_ids=False, show_progress=False)
        b_ids, b_s = self.retriever.retrieve(toks, k=min(bm25_n, len(self.texts)), show_progress=False)
        out = []
        for j in range(len(questions)):
            fused: dict[int, float] = {}
            for ranked in (top[j], [d for d, s in zip(b_ids[j], b_s[j]) if s > 0]):
                for r, c in enumerate(ranked, 1):
                    fused[int(c)] = fused.get(int(c), 0.0) + 1.0 / (rrf_k + r)
            best = sorted(fused.items(), key=lambda kv: -kv[1])[:fused_n]
            out.append([self.texts[c] for c, _ in best])
        return out


def count_encodes(embedder) -> dict:
    """Counts what one Embedder instance encodes (rerank + answer embed at query time)."""
    seen = {"texts": 0, "chars": 0}
    encode = embedder.encode

    def counting(texts, batch_size: int = 32, **kw):  # kw: role (query | passage), as Embedder.encode
        seen["texts"] += len(texts)
        seen["chars"] += sum(len(t) for t in texts)
        return encode(texts, batch_size, **kw)

    embedder.encode = counting
    return seen


def _rate(n: int, seconds: float) -> float:
    return n / seconds if seconds > 0 else float("nan")


def bench_retrieval(cfg, index: dict, questions: list[dict], n_answer: int, batch: int,
                    work: str, report: Report) -> dict:
    from pipelines.answer import run_answer
    from transforms.ingest.embed import model_spec_from_config
    from transforms.query.engine import QAEngine
    from transforms.query.records import Question

    spec = model_spec_from_config(cfg)
    embedder = index["embedder"]
    qs = [Question(id=q["id"], question=q["question"], line=i + 1) for i, q in enumerate(questions)]
    texts = [q.question for q in qs]
    batches = [qs[i:i + batch] for i in range(0, len(qs), batch)]
    rc = cfg.retrieve

    with timed() as load_engine:
        engine = QAEngine(index["version_dir"], cfg, spec, embedder=embedder)
    con = engine.con
    corpus = [r[0] for r in con.execute("SELECT coalesce(context, '') || '\n' || coalesce(text, '') "
                                        "FROM chunks ORDER BY chunk_no").fetchall()]
    with timed() as load_base:
        base = Bm25NumpyBaseline(corpus, np.concatenate([np.asarray(s.vectors) for s in engine.searchers]), embedder)

    def run_engine():
        for b in batches:
            engine.retrieve(b)

    def run_base():
        for b in batches:
            base.retrieve([q.question for q in b], rc.dense_top_n, rc.bm25_top_n, rc.fused_top_n, rc.rrf_k)

    run_engine(), run_base()  # warm-up: stemmer memo, BLAS threads, page cache
    with timed() as t_eng:
        run_engine()
    with timed() as t_base:
        run_base()
    with timed() as t_emb:
        qvecs = embedder.encode_queries(texts)
    lookup = LookupEmbedder(texts, qvecs)
    engine.embedder, base.embedder = lookup, lookup
    with timed() as t_eng_x:
        run_engine()
    with timed() as t_base_x:
        run_base()
    engine.embedder, base.embedder = embedder, embedder

    n = len(qs)
    label = f"bm25s (k1=0.9,b=0.4) + numpy exact + RRF, same {len(corpus)} chunks"
    report.add(Figure(SECTION, f"retrieve q/s incl. question embedding ({n} q, batch {batch})",
                      _rate(n, t_eng.s), "q/s", _rate(n, t_base.s), label,
                      note="both embed the questions with the same Embedder"))
    report.add(Figure(SECTION, "retrieve q/s excl. question embedding", _rate(n, t_eng_x.s), "q/s",
                      _rate(n, t_base_x.s), label, note="vectors precomputed for both; the engine also fuses "
                      "with exact scores for missing chunks and builds Candidate rows from its in-memory "
                      "chunk table, the baseline indexes a Python list"))
    report.add(Figure(SECTION, "question embedding alone", _rate(n, t_emb.s), "q/s"))
    report.add(Figure(SECTION, "load: QAEngine open (matrices, BM25 postings)", load_engine.s, "s",
                      load_base.s, "bm25s index build + matrix load"))

    # rerank + extractive answer, in batches of the job's batch size; answer and retrieval
    # alternate, best of 3 each, so that neither gets the quieter moment of the machine
    sub = qs[:n_answer]
    engine.answer_batch(sub[:2], cfg.output.retrieved_top_k)  # warm-up
    encoded = count_encodes(embedder)
    with timed() as t_ans:
        for i in range(0, len(sub), cfg.output.batch_size):
            engine.answer_batch(sub[i:i + cfg.output.batch_size], cfg.output.retrieved_top_k)
    del embedder.encode  # back to the class method
    t_answer, t_retrieve = t_ans.s, float("inf")
    for round_no in range(3):
        if round_no:
            with timed() as t:
                for i in range(0, len(sub), cfg.output.batch_size):
                    engine.answer_batch(sub[i:i + cfg.output.batch_size], cfg.output.retrieved_top_k)
            t_answer = min(t_answer, t.s)
        with timed() as t:
            for i in range(0, len(sub), cfg.output.batch_size):
                engine.retrieve(sub[i:i + cfg.output.batch_size])
        t_retrieve = min(t_retrieve, t.s)
    engine.close()
    ans_rate = _rate(len(sub), t_answer)
    report.add(Figure(SECTION, f"answer_batch q/s: retrieve + {cfg.rerank.kind} rerank + {cfg.answer.kind} "
                      f"({len(sub)} q, best of 3)", ans_rate, "q/s", _rate(len(sub), t_retrieve),
                      "QAEngine.retrieve alone, same questions",
                      note=f"{encoded['texts'] / max(len(sub), 1):.0f} texts embedded per question "
                           f"(questions + candidate sentences), {encoded['chars'] / max(encoded['texts'], 1):.0f} "
                           "chars each"))

    qfile = write_questions(questions[:n_answer], os.path.join(work, "questions-answer.jsonl"))
    out = os.path.join(work, "answers.jsonl")
    s = run_answer(cfg, index["index_dir"], qfile, out, progress=False, log=quiet)
    if s["questions_written"] != len(sub):
        raise RuntimeError(f"run_answer wrote {s['questions_written']} of {len(sub)} answers")
    report.add(Figure(SECTION, f"run_answer Beam job q/s ({len(sub)} q, {s['shards']} shards)",
                      _rate(len(sub), s["wall_s"]), "q/s", ans_rate, "answer_batch in-process, same questions",
                      note="job wall includes engine setup and shard writes"))
    return {"qvecs": qvecs, "answer_summary": s}
