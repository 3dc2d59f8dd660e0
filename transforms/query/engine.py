"""The answer job's per-batch stage: embed -> dense + BM25 -> fuse -> rerank -> answer.

`QAEngine` is plain and testable: it opens one index version read-only, loads
the dense matrix and the BM25 postings once, and answers a batch of questions
with one matrix product per retriever. `AnswerShardFn` wraps it for Beam.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from transforms.index.artifacts import open_artifact, read_meta
from transforms.ingest.embed import Embedder, ModelSpec
from transforms.query.fuse import rrf_fuse
from transforms.query.rerank import VectorCache
from transforms.query.retrieve import BM25Index, DenseIndex, FilterMasks, choose_dense_mode, fetch_chunks, search_hnsw


class IndexMismatchError(RuntimeError):
    pass


@dataclass
class Question:
    id: str
    question: str
    acl: Optional[list[str]] = None
    filters: Optional[dict[str, Any]] = None
    metadata: Optional[dict[str, Any]] = None
    line: int = 0  # 1-based position in the input, for stable output order


def check_model(manifest: dict, spec: ModelSpec) -> None:
    """Questions must be embedded by exactly the model that embedded the index."""
    m = manifest.get("model", {})
    if m.get("id") != spec.model_id or m.get("sha256") != spec.model_sha256 or \
            m.get("max_length") != spec.max_length:
        raise IndexMismatchError(
            f"index was embedded with model {m.get('id')} (sha256 {str(m.get('sha256'))[:12]}…, "
            f"max_length {m.get('max_length')}) but the config gives {spec.model_id} "
            f"(sha256 {spec.model_sha256[:12]}…, max_length {spec.max_length}); "
            "re-index or use the index's model")


class QAEngine:
    def __init__(self, version_dir: str, cfg, spec: ModelSpec, embedder: Optional[Embedder] = None):
        from transforms.query.answer import ExtractiveAnswerer, GeneratorAnswerer
        from transforms.query.rerank import make_reranker

        with open(os.path.join(version_dir, "manifest.json"), encoding="utf-8") as f:
            self.manifest = json.load(f)
        check_model(self.manifest, spec)
        self.version = self.manifest["version"]
        self.cfg = cfg
        self.con = open_artifact(os.path.join(version_dir, "index.duckdb"), read_only=True,
                                 ef_search=cfg.artifacts.hnsw.ef_search)
        self.meta = read_meta(self.con)
        self.dense = DenseIndex.from_artifact(self.con)
        self.dense_mode = choose_dense_mode(self.dense.n, cfg.retrieve.mode)
        self.bm25 = BM25Index(self.con)
        self.masks = FilterMasks(self.con)
        self.embedder = embedder or Embedder(spec)
        # Sentence vectors shared across batches: questions hitting the same chunks reuse
        # them. ~1.5 KB a sentence, so 200k entries stay near 300 MB before a reset.
        self.sentence_vectors = VectorCache(max_entries=200_000)
        r = cfg.rerank
        if r.kind == "embedding":
            self.reranker = make_reranker("embedding", embedder=self.embedder, rrf_k=cfg.retrieve.rrf_k)
        elif r.kind == "cross_encoder":
            self.reranker = make_reranker("cross_encoder", model_dir=r.model_dir)
        else:
            self.reranker = make_reranker("none")
        a = cfg.answer
        if a.kind == "extractive":
            self.answerer = ExtractiveAnswerer(self.embedder, max_sentences=a.max_sentences,
                                               threshold=a.threshold, top_chunks=a.top_chunks)
        else:
            self.answerer = GeneratorAnswerer(_chat_client(a), max_sources=a.top_chunks)

    def close(self) -> None:
        self.con.close()

    def retrieve(self, questions: list[Question]) -> list[list[dict]]:
        """Fused first-stage candidates per question (filters applied inside each search)."""
        rc = self.cfg.retrieve
        texts = [q.question for q in questions]
        masks = [self.masks.get(q.acl, q.filters) for q in questions]
        allowed = masks[0] if all(m is masks[0] for m in masks) else np.stack(masks)
        qvecs = self.embedder.encode(texts)
        if self.dense_mode == "exact":
            d_scores, d_ids = self.dense.search(qvecs, rc.dense_top_n, allowed)
        else:
            d_scores, d_ids = search_hnsw(self.con, qvecs, rc.dense_top_n, allowed)
        b_scores, b_ids = self.bm25.search(texts, rc.bm25_top_n, allowed)
        fused = []
        for j in range(len(questions)):
            ranked = rrf_fuse({"dense": [int(i) for i in d_ids[j] if i >= 0],
                               "bm25": [int(i) for i in b_ids[j] if i >= 0]},
                              k=rc.rrf_k, weights={"dense": rc.dense_weight, "bm25": rc.bm25_weight},
                              top_n=rc.fused_top_n)
            fused.append(ranked)
        rows = fetch_chunks(self.con, [c for ranked in fused for c, _ in ranked])
        by_no = {r["chunk_no"]: r for r in rows}
        out = []
        for j, ranked in enumerate(fused):
            dense_rank = {int(c): r for r, c in enumerate(d_ids[j], 1) if c >= 0}
            bm25_rank = {int(c): r for r, c in enumerate(b_ids[j], 1) if c >= 0}
            cands = []
            for rank, (c, score) in enumerate(ranked, 1):
                cand = dict(by_no[c])
                cand.update(score=float(score), rank=rank, first_stage_score=float(score),
                            dense_rank=dense_rank.get(c), bm25_rank=bm25_rank.get(c))
                cands.append(cand)
            out.append(cands)
        return out

    def answer_batch(self, questions: list[Question], top_k: int) -> list[dict]:
        cands = self.retrieve(questions)
        texts = [q.question for q in questions]
        head = self.cfg.rerank.top_n
        # Reranker and answerer share one sentence-vector cache: each sentence is embedded once.
        reranked = self.reranker.rerank(texts, [c[:head] for c in cands], cache=self.sentence_vectors)
        results = self.answerer.answer(texts, reranked, cache=self.sentence_vectors)
        # The reranker reorders the head; the fused tail keeps its order after it.
        reranked = [r + c[head:] for r, c in zip(reranked, cands)]
        out = []
        for q, ranked, res in zip(questions, reranked, results):
            out.append({
                "id": q.id,
                "question": q.question,
                "answer": res.answer,
                "status": res.status,
                "error": res.error,
                "citations": res.citations,
                "invalid_citations": res.n_invalid_citations,
                "unsupported_sentences_removed": getattr(res, "n_sentences_removed", 0),
                "unfound_quotes_removed": getattr(res, "n_quotes_removed", 0),
                "evidence_score": round(float(res.evidence_score), 4),
                "retrieved": [{"rank": i + 1, "doc_id": c["doc_id"], "chunk_id": c["chunk_id"],
                               "source": c["source_uri"], "score": round(float(c["score"]), 6)}
                              for i, c in enumerate(ranked[:top_k])],
                "index_version": self.version,
            })
        return out


def _chat_client(a):
    from transforms.query.answer import BedrockClient, OpenAICompatibleClient

    if a.kind == "openai":
        if not a.base_url or not a.model:
            raise ValueError("answer.base_url and answer.model are required for answer.kind: openai")
        return OpenAICompatibleClient(a.base_url, a.model, api_key=a.api_key, timeout=a.timeout_s,
                                      retries=a.retries, backoff_s=a.backoff_s, budget_s=a.budget_s)
    if not a.model:
        raise ValueError("answer.model (a Bedrock model id) is required for answer.kind: bedrock")
    return BedrockClient(a.model, region=a.region, timeout=a.timeout_s, max_attempts=a.retries + 1)


# --- Beam wrapper -------------------------------------------------------------------

import apache_beam as beam  # noqa: E402
from apache_beam.metrics import Metrics  # noqa: E402

from transforms.common.counters import NAMESPACE as METRICS_NAMESPACE  # noqa: E402


class AnswerShardFn(beam.DoFn):
    """(shard, questions) -> the shard's output records, answered in batches.

    The engine (DuckDB read-only, matrices, models) is built once per worker.
    """

    def __init__(self, version_dir: str, cfg, spec: ModelSpec, progress_every_s: float = 0.0):
        self.version_dir, self.cfg, self.spec = version_dir, cfg, spec
        self.progress_every_s = progress_every_s
        self.answered = Metrics.counter(METRICS_NAMESPACE, "answered")
        self.not_found = Metrics.counter(METRICS_NAMESPACE, "not_found")
        self.unsupported = Metrics.counter(METRICS_NAMESPACE, "unsupported")
        self.errors = Metrics.counter(METRICS_NAMESPACE, "answer_errors")
        self.invalid = Metrics.counter(METRICS_NAMESPACE, "invalid_citations_removed")

    def setup(self):
        import time
        self.engine = QAEngine(self.version_dir, self.cfg, self.spec)
        self._t0 = self._last = time.monotonic()
        self._done = 0

    def teardown(self):
        if getattr(self, "engine", None):
            self.engine.close()

    def process(self, element):
        import time
        shard, records = element
        out = []
        good = [r for r in records if isinstance(r, Question)]
        bs = self.cfg.output.batch_size
        for i in range(0, len(good), bs):
            batch = good[i:i + bs]
            try:
                answered = self.engine.answer_batch(batch, self.cfg.output.retrieved_top_k)
            except Exception:  # a failing batch: each question again alone, so one bad one fails alone
                answered = [self._answer_alone(q) for q in batch]
            for q, rec in zip(batch, answered):
                rec["line"] = q.line  # the writer restores input order within the shard
                {"answered": self.answered, "not_found": self.not_found,
                 "unsupported": self.unsupported}.get(rec["status"], self.errors).inc()
                self.invalid.inc(rec.get("invalid_citations") or 0)
            out.extend(answered)
            self._done += len(batch)
            now = time.monotonic()
            if self.progress_every_s and now - self._last >= self.progress_every_s:
                self._last = now
                print(f"  answered {self._done} questions ({self._done / (now - self._t0):.1f}/s)", flush=True)
        for r in records:
            if isinstance(r, dict):  # unreadable input lines travel as error records
                self.errors.inc()
                out.append(r)
        yield shard, out

    def _answer_alone(self, q: Question) -> dict:
        from transforms.common.redact import redact_text
        try:
            return self.engine.answer_batch([q], self.cfg.output.retrieved_top_k)[0]
        except Exception as e:
            return error_record(q.id, q.question, redact_text(f"{type(e).__name__}: {e}"))


def error_record(qid: Optional[str], question: Optional[str], reason: str) -> dict:
    return {"id": qid, "question": question, "answer": "", "status": "error", "error": reason,
            "citations": [], "invalid_citations": 0, "evidence_score": 0.0, "retrieved": [],
            "index_version": None}
