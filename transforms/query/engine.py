"""The answer job's per-batch stage: embed -> dense + BM25 -> fuse -> rerank -> answer.

`QAEngine` is plain and testable: it opens one index version read-only, loads
the dense matrix and the BM25 postings once, and answers a batch of questions
with one matrix product per retriever. `AnswerShardFn` wraps it for Beam.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field, replace
from typing import Optional

import numpy as np

from transforms.common.errors import ActionableError
from transforms.index.artifacts import open_artifact, read_meta
from transforms.ingest.embed import Embedder, ModelSpec
from transforms.ingest.sentvec import SentenceStore
from transforms.query.chunkstore import ChunkTable
from transforms.query.extract import SentenceAnswerer, question_form
from transforms.query.fuse import bm25_scores_for, convex_fuse, rrf_fuse
from transforms.query.records import AnswerRecord, Candidate, Question
from transforms.records import record_id_of
from transforms.query.rerank import VectorCache
from transforms.query.retrieve import BM25Index, DenseIndex, FilterMasks, choose_dense_mode, search_hnsw


class IndexMismatchError(ActionableError):
    """The config's model or profile is not the one that embedded the index (one CLI line)."""


# What a manifest written before profiles implies: the packaged model's conventions.
_PRE_PROFILE_CONVENTIONS = {"pooling": "mean", "query_prefix": "", "passage_prefix": "", "normalize": True}


def check_model(manifest: dict, spec: ModelSpec) -> None:
    """Questions must be embedded by exactly the model and profile that embedded the index:
    the same file, length, pooling, prefixes and normalisation."""
    m = manifest.get("model", {})
    built = {k: m.get(k, default) for k, default in _PRE_PROFILE_CONVENTIONS.items()}
    asked = {"pooling": spec.pooling, "query_prefix": spec.query_prefix,
             "passage_prefix": spec.passage_prefix, "normalize": spec.normalize}
    if m.get("id") != spec.model_id or m.get("sha256") != spec.model_sha256 or \
            m.get("max_length") != spec.max_length:
        raise IndexMismatchError(
            f"index was embedded with model {m.get('id')} (profile {m.get('profile', 'minilm')}, "
            f"sha256 {str(m.get('sha256'))[:12]}…, max_length {m.get('max_length')}) but the config gives "
            f"{spec.model_id} (profile {spec.profile_name}, sha256 {spec.model_sha256[:12]}…, "
            f"max_length {spec.max_length}); re-index or use the index's model (embed.profile)")
    if built != asked:
        differ = ", ".join(f"{k} {built[k]!r} vs {asked[k]!r}" for k in built if built[k] != asked[k])
        raise IndexMismatchError(
            f"index was embedded with profile {m.get('profile', 'minilm')} but the config gives "
            f"{spec.profile_name}: {differ} (index vs config); re-index or use the index's embed.profile")


class QAEngine:
    def __init__(self, version_dir: str, cfg, spec: ModelSpec, embedder: Optional[Embedder] = None):
        from transforms.query.answer import GeneratorAnswerer
        from transforms.query.extract import EVIDENCE_MODEL, SentenceParams
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
        if self.dense_mode == "hnsw" and not self.meta.get("hnsw", True):
            self.dense_mode = "exact"  # built without the index (index-time mode): exact is the same answer
        self.bm25 = BM25Index(self.con, k1=cfg.retrieve.bm25_k1, b=cfg.retrieve.bm25_b)
        self.masks = FilterMasks(self.con)
        # Loaded once: the rows answers show and quote (no DuckDB query per batch), and the
        # index-time sentence vectors (None for an index built before them: the answerer then
        # embeds those chunks' sentences at answer time).
        self.chunks = ChunkTable.from_artifact(self.con)
        self.sentences = SentenceStore.from_artifact(self.con)
        self.doc_ids = self.chunks.doc_id  # chunk_no -> doc_id, for document rankings
        self.chunk_ids = np.asarray(self.chunks.table.column("chunk_id").to_pylist(), dtype=object)
        self.embedder = embedder or Embedder(spec)
        # Sentence vectors shared across batches: questions hitting the same chunks reuse
        # them. ~1.5 KB a sentence, so 200k entries stay near 300 MB before a reset.
        self.sentence_vectors = VectorCache(max_entries=200_000)
        r = cfg.rerank
        fusion = {"fusion": r.fusion} if r.fusion else {}
        if r.kind == "embedding":
            self.reranker = make_reranker("embedding", embedder=self.embedder, rrf_k=cfg.retrieve.rrf_k,
                                          top_sentences=r.top_sentences, chunk_weight=r.chunk_weight, **fusion)
        elif r.kind == "cross_encoder":
            self.reranker = make_reranker("cross_encoder", model_dir=r.model_dir, rrf_k=cfg.retrieve.rrf_k,
                                          **fusion)
        else:
            self.reranker = make_reranker("none")
        a = cfg.answer
        # candidates that get fixed-scale scores (absolute_scores): every chunk the answerer
        # may see, i.e. its top_chunks, or the reranker's whole head when a reranker reorders it
        self.scored_head = a.top_chunks if r.kind == "none" else max(a.top_chunks, r.top_n)
        if a.kind == "extractive":
            self.answerer = SentenceAnswerer(self.embedder, self.sentences, SentenceParams(
                max_sentences=a.max_sentences, top_chunks=a.top_chunks, threshold=a.evidence_threshold, gap=a.gap,
                conflict_gap=a.conflict_gap,
                lexical_weight=a.lexical_weight, rank_weight=a.rank_weight, mmr_lambda=a.mmr_lambda,
                dup_sim=a.dup_sim, type_weight=a.type_weight, same_source_bonus=a.same_source_bonus,
                form_filter=a.form_filter, restate_overlap=a.restate_overlap,
                call_lexical=a.call_lexical, call_chunks=a.call_chunks,
                evidence_lexical_weight=a.evidence_lexical_weight,
                evidence_model=EVIDENCE_MODEL if a.evidence == "model" else None))
            if a.lexical_idf:
                self.answerer.set_idf(self.chunks.table.column("text").to_pylist())
        else:
            self.answerer = GeneratorAnswerer(_chat_client(a), max_sources=a.top_chunks)

    def close(self) -> None:
        self.con.close()

    # --- the stages -------------------------------------------------------------------

    def allowed(self, questions: list[Question]) -> np.ndarray:
        """Each question's ACL/filter mask (one shared mask when all are alike)."""
        masks = [self.masks.get(q.acl, q.filters) for q in questions]
        return masks[0] if all(m is masks[0] for m in masks) else np.stack(masks)

    def search(self, texts: list[str], allowed, qvecs: Optional[np.ndarray] = None, *,
               dense_n: Optional[int] = None, bm25_n: Optional[int] = None) -> list[Rankings]:
        """First stage per question: dense and BM25 top lists (filters applied inside each
        search) and their fusion, as (chunk_no, score) lists."""
        rc = self.cfg.retrieve
        if qvecs is None:
            qvecs = self.embedder.encode_queries(texts)
        dense_n, bm25_n = dense_n or rc.dense_top_n, bm25_n or rc.bm25_top_n
        if self.dense_mode == "exact":
            d_scores, d_ids = self.dense.search(qvecs, dense_n, allowed)
        else:
            d_scores, d_ids = search_hnsw(self.con, qvecs, dense_n, allowed)
        terms, bounds = self.bm25.analyze(texts)  # one analysis for the search, the fill and the bound
        b_scores, b_ids = self.bm25.search(texts, bm25_n, allowed, terms=terms)
        qn = qvecs / np.clip(np.linalg.norm(qvecs, axis=1, keepdims=True), 1e-12, None)
        out = []
        for j in range(len(texts)):
            dense = [(int(i), float(s)) for i, s in zip(d_ids[j], d_scores[j]) if i >= 0]
            bm25 = [(int(i), float(s)) for i, s in zip(b_ids[j], b_scores[j]) if i >= 0]
            fused = self.fuse(d_ids[j], d_scores[j], b_ids[j], b_scores[j], qvec=qn[j], terms=terms[j],
                              bm25_bound=float(bounds[j]))
            out.append(Rankings(dense, bm25, [(int(c), float(s)) for c, s in fused],
                                qvec=qn[j], terms=terms[j], bm25_bound=float(bounds[j])))
        return out

    def fuse(self, d_ids, d_scores, b_ids, b_scores, top_n: Optional[int] = None,
             qvec: Optional[np.ndarray] = None, terms: Optional[np.ndarray] = None,
             bm25_bound: Optional[float] = None) -> list[tuple[int, float]]:
        """One question's fused ranking [(chunk_no, score)] from its dense and BM25 lists
        (retrieve.fusion). Convex fusion takes each retriever's top dense_top_n / bm25_top_n
        (so a deeper list, the eval's, fuses exactly what the answer job fuses) and scores a
        chunk missing from one list exactly on that side (the cosine; the BM25 sum over the
        question's term ids)."""
        rc = self.cfg.retrieve
        if rc.fusion == "convex":
            nd, nb = rc.dense_top_n, rc.bm25_top_n
            dfill = (lambda c: self.dense.matrix[c] @ qvec) if qvec is not None else None
            bfill = (lambda c: bm25_scores_for(self.bm25, terms, c)) if terms is not None else None
            return convex_fuse(d_ids[:nd], d_scores[:nd], b_ids[:nb], b_scores[:nb], alpha=rc.fusion_alpha,
                               norm=rc.fusion_norm, top_n=top_n, dense_fill=dfill, bm25_fill=bfill,
                               bm25_bound=bm25_bound)
        return rrf_fuse({"dense": [int(i) for i in d_ids if i >= 0], "bm25": [int(i) for i in b_ids if i >= 0]},
                        k=rc.rrf_k, weights={"dense": rc.dense_weight, "bm25": rc.bm25_weight}, top_n=top_n)

    def candidates(self, rankings: list[Rankings]) -> list[list[Candidate]]:
        """The fused head (retrieve.fused_top_n) of each question as Candidates with scores."""
        n = self.cfg.retrieve.fused_top_n
        wanted = sorted({c for r in rankings for c, _ in r.fused[:n]})
        by_no = {c.chunk_no: c for c in self.chunks.candidates(wanted)}
        out = []
        for r in rankings:
            dense_rank = {c: i for i, (c, _) in enumerate(r.dense, 1)}
            bm25_rank = {c: i for i, (c, _) in enumerate(r.bm25, 1)}
            head = np.array([c for c, _ in r.fused[:self.scored_head]], np.int64)
            cos, cover = self.absolute_scores(r, head)
            cands = []
            for rank, (c, score) in enumerate(r.fused[:n], 1):
                extra = {"dense_cosine": cos[rank - 1], "bm25_coverage": cover[rank - 1]} if rank <= len(head) else {}
                cands.append(replace(by_no[c], score=score, rank=rank, first_stage_score=score,
                                     dense_rank=dense_rank.get(c), bm25_rank=bm25_rank.get(c), **extra))
            out.append(cands)
        return out

    def absolute_scores(self, r: "Rankings", chunk_nos: np.ndarray) -> tuple[list, list]:
        """Per chunk: its cosine with the question and its BM25 score over the question's best
        possible (BM25Index.bound), i.e. scores that mean the same for every question (the
        answerer's evidence model uses them to tell answerable questions from the rest)."""
        if r.qvec is None or not len(chunk_nos):
            return [None] * len(chunk_nos), [None] * len(chunk_nos)
        cos = self.dense.matrix[chunk_nos] @ r.qvec
        bound = r.bm25_bound or 0.0
        bm = bm25_scores_for(self.bm25, r.terms, chunk_nos) / bound if bound > 0 else np.zeros(len(chunk_nos))
        return [float(x) for x in cos], [float(x) for x in bm]

    def retrieve(self, questions: list[Question]) -> list[list[Candidate]]:
        """Fused first-stage candidates per question."""
        return self.candidates(self.search([q.question for q in questions], self.allowed(questions)))

    def ranked_docs(self, head: list[Candidate], fused: list[tuple[int, float]], k: int = 10) -> list[dict]:
        """The final document ranking: reranked head, then the rest of the fused list, each
        document at its first chunk. This is what an external scorer sees in the answer file."""
        seen: set = set()
        out: list[dict] = []
        order = [(c.chunk_no, c.final_score) for c in head]
        in_head = {c for c, _ in order}
        order += [(c, s) for c, s in fused if c not in in_head]
        for c, s in order:
            d = self.doc_ids[c]
            if d not in seen:
                seen.add(d)
                out.append({"rank": len(out) + 1, "doc_id": d, "score": round(float(s), 6)})
                rid = record_id_of(d)
                if rid is not None:  # a JSONL record: the id its file gave it (what qrels name)
                    out[-1]["record_id"] = rid
                if len(out) == k:
                    break
        return out

    def run(self, questions: list[Question], top_k: int, *, trace: bool = False,
            allowed=None, qvecs: Optional[np.ndarray] = None) -> list[AnswerRecord]:
        """The whole engine for a batch: the one code path behind `ragbeam answer`,
        `ragbeam eval` and the publish gate. `allowed` overrides the questions' own masks
        (evaluation hides gold documents this way)."""
        t = [time.perf_counter()]
        texts = [q.question for q in questions]
        if qvecs is None:
            qvecs = self.embedder.encode_queries(texts)
        t.append(time.perf_counter())
        rankings = self.search(texts, self.allowed(questions) if allowed is None else allowed, qvecs)
        cands = self.candidates(rankings)
        t.append(time.perf_counter())
        head_n = self.cfg.rerank.top_n
        # Reranker and answerer share one sentence-vector cache: each sentence is embedded once.
        heads = self.reranker.rerank(texts, [c[:head_n] for c in cands], cache=self.sentence_vectors)
        t.append(time.perf_counter())
        results = self.answer(texts, heads, qvecs)
        t.append(time.perf_counter())
        ms = {name: round((t[i + 1] - t[i]) * 1000 / max(1, len(questions)), 3)
              for i, name in enumerate(("embed", "retrieve", "rerank", "answer"))}
        out = []
        for q, r, head, tail, res in zip(questions, rankings, heads, cands, results):
            ranked = head + tail[head_n:]  # the reranker reorders the head; the fused tail follows
            rec = AnswerRecord(
                id=q.id, question=q.question, answer=res.answer, status=res.status, error=res.error,
                citations=res.citations, invalid_citations=res.n_invalid_citations,
                unsupported_sentences_removed=getattr(res, "n_sentences_removed", 0),
                unfound_quotes_removed=getattr(res, "n_quotes_removed", 0),
                evidence_score=round(float(res.evidence_score), 4),
                conflicts=getattr(res, "conflicts", []),
                retrieved=[{"rank": i + 1, "doc_id": c.doc_id, "chunk_id": c.chunk_id,
                            "source": c.source_uri, "score": round(float(c.final_score), 6)}
                           for i, c in enumerate(ranked[:top_k])],
                retrieved_docs=self.ranked_docs(head, r.fused),
                index_version=self.version, line=q.line)
            if trace:
                rec.trace = self._trace(r, head, ms, q.question)
            out.append(rec)
        return out

    def answer(self, texts: list[str], candidates: list[list[Candidate]], qvecs: np.ndarray):
        """The configured answerer; the extractive one reuses the question vectors of retrieval
        and the index-time sentence vectors, so a batch costs one model call."""
        if isinstance(self.answerer, SentenceAnswerer):
            return self.answerer.answer(texts, candidates, cache=self.sentence_vectors, qvecs=qvecs)
        return self.answerer.answer(texts, candidates, cache=self.sentence_vectors)

    def answer_batch(self, questions: list[Question], top_k: int, trace: bool = False) -> list[AnswerRecord]:
        return self.run(questions, top_k, trace=trace)

    def _trace(self, r: Rankings, head: list[Candidate], ms: dict, question: str = "") -> dict:
        ids = self.chunk_ids

        def ranked(pairs, n=20):
            return [[ids[c], round(s, 6)] for c, s in pairs[:n]]
        n_ctx = self.cfg.answer.top_chunks
        if isinstance(self.answerer, SentenceAnswerer) and self.answerer.p.call_chunks and question_form(question) == "call":
            n_ctx = max(n_ctx, self.answerer.p.call_chunks)  # a call question also reads further definitions
        return {"dense": ranked(r.dense), "bm25": ranked(r.bm25), "fused": ranked(r.fused),
                "reranked": [[c.chunk_id, round(float(c.final_score), 6)] for c in head],
                "context": [{"chunk_id": c.chunk_id, "doc_id": c.doc_id, "context": c.context,
                             "text": c.text, "dense_cosine": _round(c.dense_cosine),
                             "bm25_coverage": _round(c.bm25_coverage)} for c in head[:n_ctx]],
                "ms_per_question": ms}


def _round(x: Optional[float]) -> Optional[float]:
    return None if x is None else round(float(x), 6)


@dataclass
class Rankings:
    """One question's first-stage lists, best first, as (chunk_no, score)."""
    dense: list[tuple[int, float]]
    bm25: list[tuple[int, float]]
    fused: list[tuple[int, float]]
    qvec: Optional[np.ndarray] = field(default=None, repr=False)  # the unit question vector
    terms: Optional[np.ndarray] = field(default=None, repr=False)  # its distinct BM25 term ids
    bm25_bound: Optional[float] = None  # its best possible BM25 score (BM25Index.bounds)


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
