"""The answer job's per-batch stage: embed -> dense + BM25 per segment -> gather -> fuse -> rerank -> answer.

`QAEngine` is plain and testable: it opens one index version's segments memory-mapped
(transforms/query/segment_search.py searches each with one matrix product per retriever),
gathers their hits per question and answers. `AnswerSide` is the part after the gather,
which the Beam answer job runs on its own when it scatters the search over segments.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field, replace
from typing import Optional

import numpy as np

from transforms.common.errors import ActionableError
from transforms.ingest.embed import Embedder, ModelSpec
from transforms.query.extract import SentenceAnswerer, question_form
from transforms.query.finite import finite_or_not_found
from transforms.query.fuse import convex_fuse, rrf_fuse
from transforms.query.records import AnswerRecord, Candidate, Question
from transforms.records import record_id_of
from transforms.query.rerank import VectorCache


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


class AnswerSide:
    """Everything after the first stage, over a version's segments: fusion of the gathered lists,
    candidate rows, rerank, answer and records. The Beam answer job runs it on the gather side;
    QAEngine (below) adds the segment searchers for a whole version in one process."""

    def __init__(self, version_dir: str, cfg, spec: ModelSpec, embedder: Optional[Embedder] = None,
                 manifest: Optional[dict] = None):
        from transforms.common import storage
        from transforms.common.duck import connect
        from transforms.index.bm25 import Analyzer
        from transforms.index.segments import BM25_STEMMER
        from transforms.query.answer import GeneratorAnswerer
        from transforms.query.answer_params import answer_params
        from transforms.query.rerank import make_reranker
        from transforms.query.version_segments import VersionSegments

        self.manifest = manifest or json.loads(storage.read_text(storage.join(version_dir, "manifest.json")))
        check_model(self.manifest, spec)
        self.version = self.manifest["version"]
        self.cfg = cfg
        self.segments = VersionSegments(version_dir, self.manifest)
        self.num_docs = self.segments.num_docs
        self._stem_con = connect(":memory:", memory_limit="256MB")  # the fts stemmer, for the query analysis
        self.analyzer = Analyzer(self._stem_con, BM25_STEMMER)
        self.embedder = embedder or _LazyEmbedder(spec)  # the gather side may never need the model
        self._query_encoder = None
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
        # convex fusion's settings in force (set, or the embedding profile's fit), read once
        self.convex_settings = dict(alpha=cfg.fusion_alpha, norm=cfg.fusion_norm, alpha_min=cfg.fusion_alpha_min)
        if a.kind == "extractive":
            self.answerer = SentenceAnswerer(self.embedder, self.segments.sentences, answer_params(cfg))
        else:
            self.answerer = GeneratorAnswerer(_chat_client(a), max_sources=a.top_chunks,
                                              max_source_chars=a.max_source_chars, concurrency=a.concurrency,
                                              min_support=a.claim_support)

    def close(self) -> None:
        self._stem_con.close()

    def query_vectors(self, texts: list[str]) -> np.ndarray:
        """The questions' query vectors: the model's, fused with the llm's rewrites when
        rewrite.kind asks for them (transforms/query/rewrite.py)."""
        if self._query_encoder is None:
            from transforms.query.rewrite import query_encoder
            self._query_encoder = query_encoder(self.embedder, self.cfg)
        self._query_encoder.embedder = self.embedder  # follows a swapped embedder (bench: precomputed vectors)
        return self._query_encoder.encode(texts)

    @property
    def rewrite_failed(self) -> int:
        """Questions so far whose rewriting failed (they kept their own vector)."""
        return self._query_encoder.rewrite_failed if self._query_encoder is not None else 0

    # --- the stages -------------------------------------------------------------------

    def analyze(self, texts: list[str]) -> tuple[list[list[str]], list[set]]:
        """Per question: its distinct analysed BM25 terms (sorted) and its content words."""
        from transforms.common.words import content_words
        terms = [sorted(set(t)) for t in self.analyzer.analyze(texts)]
        return terms, [content_words(t) for t in texts]

    def rankings(self, gathered: list, qvecs: np.ndarray, terms: list[list[str]]) -> list["Rankings"]:
        """Each question's dense, BM25 and fused lists from its gathered hits (segment_search.gather)."""
        qn = qvecs / np.clip(np.linalg.norm(qvecs, axis=1, keepdims=True), 1e-12, None)
        out = []
        for j, g in enumerate(gathered):
            fused = self.fuse(g, qn[j])
            out.append(Rankings(g.dense, g.bm25, fused, qvec=qn[j], terms=terms[j], bm25_bound=g.bm25_bound,
                                cos_of=g.cos_of, bm25_of=g.bm25_of, word_df=g.word_df))
        return out

    def fuse(self, g, qvec: Optional[np.ndarray] = None, top_n: Optional[int] = None) -> list[tuple[int, float]]:
        """One question's fused ranking [(chunk_no, score)] from its gathered lists
        (retrieve.fusion). Convex fusion takes each retriever's top dense_top_n / bm25_top_n
        (so a deeper list, the eval's, fuses exactly what the answer job fuses) and scores a
        chunk missing from one list exactly on that side (both scores travel with every hit)."""
        rc = self.cfg.retrieve
        d_ids = np.array([c for c, _ in g.dense], np.int64)
        d_s = np.array([s for _, s in g.dense], np.float64)
        b_ids = np.array([c for c, _ in g.bm25], np.int64)
        b_s = np.array([s for _, s in g.bm25], np.float64)
        if rc.fusion == "convex":
            nd, nb = rc.dense_top_n, rc.bm25_top_n
            cos_of, bm_of = g.cos_of, g.bm25_of
            return convex_fuse(d_ids[:nd], d_s[:nd], b_ids[:nb], b_s[:nb], top_n=top_n, **self.convex_settings,
                               dense_fill=lambda cs: np.array([cos_of[int(c)] for c in cs]),
                               bm25_fill=lambda cs: np.array([bm_of[int(c)] for c in cs]),
                               bm25_bound=g.bm25_bound)
        return rrf_fuse({"dense": [int(i) for i in d_ids], "bm25": [int(i) for i in b_ids]},
                        k=rc.rrf_k, weights={"dense": rc.dense_weight, "bm25": rc.bm25_weight}, top_n=top_n)

    def candidates(self, rankings: list["Rankings"]) -> list[list[Candidate]]:
        """The fused head (retrieve.fused_top_n) of each question as Candidates with scores."""
        n = self.cfg.retrieve.fused_top_n
        wanted = sorted({c for r in rankings for c, _ in r.fused[:n]})
        by_no = {c.chunk_no: c for c in self.segments.candidates(wanted)}
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
        possible, i.e. scores that mean the same for every question (the answerer's evidence
        model uses them to tell answerable questions from the rest)."""
        if r.qvec is None or not len(chunk_nos):
            return [None] * len(chunk_nos), [None] * len(chunk_nos)
        bound = r.bm25_bound or 0.0
        cos = [float(r.cos_of[int(c)]) for c in chunk_nos]
        bm = [float(r.bm25_of[int(c)] / bound) if bound > 0 else 0.0 for c in chunk_nos]
        return cos, bm

    def ranked_docs(self, head: list[Candidate], fused: list[tuple[int, float]], k: int = 10) -> list[dict]:
        """The final document ranking: reranked head, then the rest of the fused list, each
        document at its first chunk. This is what an external scorer sees in the answer file."""
        seen: set = set()
        out: list[dict] = []
        order = [(c.chunk_no, c.final_score) for c in head]
        in_head = {c for c, _ in order}
        order += [(c, s) for c, s in fused if c not in in_head]
        doc_of = dict(zip([c for c, _ in order], self.segments.column("doc_id", [c for c, _ in order])))
        for c, s in order:
            d = doc_of[c]
            if d not in seen:
                seen.add(d)
                out.append({"rank": len(out) + 1, "doc_id": d, "score": round(float(s), 6)})
                rid = record_id_of(d)
                if rid is not None:  # a JSONL record: the id its file gave it (what qrels name)
                    out[-1]["record_id"] = rid
                if len(out) == k:
                    break
        return out

    def finish(self, questions: list[Question], qvecs: np.ndarray, rankings: list["Rankings"], top_k: int, *,
               trace: bool = False, t: Optional[list] = None) -> list[AnswerRecord]:
        """From first-stage rankings to answer records: candidates, rerank, answer."""
        t = t if t is not None else [time.perf_counter()] * 2
        texts = [q.question for q in questions]
        cands = self.candidates(rankings)
        t.append(time.perf_counter())
        head_n = self.cfg.rerank.top_n
        # Reranker and answerer share one sentence-vector cache: each sentence is embedded once.
        heads = self.reranker.rerank(texts, [c[:head_n] for c in cands], cache=self.sentence_vectors)
        t.append(time.perf_counter())
        self._set_idf(rankings)
        # the reranker reorders the head; the fused tail follows. The answerer reads both (a call
        # question's further definitions), the records rank by it
        read = [h + c[head_n:] for h, c in zip(heads, cands)]
        results = self.answer(texts, read, qvecs)
        t.append(time.perf_counter())
        ms = {name: round((t[i + 1] - t[i]) * 1000 / max(1, len(questions)), 3)
              for i, name in enumerate(("embed", "retrieve", "rerank", "answer")) if i + 1 < len(t)}
        out = []
        for q, r, head, ranked, res in zip(questions, rankings, heads, read, results):
            rec = AnswerRecord(
                id=q.id, question=q.question, answer=res.answer, status=res.status, error=res.error,
                citations=res.citations, invalid_citations=res.n_invalid_citations,
                unsupported_sentences_removed=getattr(res, "n_sentences_removed", 0),
                unfound_quotes_removed=getattr(res, "n_quotes_removed", 0),
                removed=getattr(res, "removed", []),
                evidence_score=round(float(res.evidence_score), 4),
                confidence=None if res.confidence is None else round(float(res.confidence), 4),
                conflicts=getattr(res, "conflicts", []),
                retrieved=[{"rank": i + 1, "doc_id": c.doc_id, "chunk_id": c.chunk_id,
                            "source": c.source_uri, "score": round(float(c.final_score), 6)}
                           for i, c in enumerate(ranked[:top_k])],
                retrieved_docs=self.ranked_docs(head, r.fused),
                index_version=self.version, line=q.line, retryable=getattr(res, "retryable", False))
            if trace:
                rec.trace = self._trace(r, head, ms, q.question, read=ranked)
            out.append(finite_or_not_found(rec))  # a non-finite score: "not found", never "answered"
        return out

    def _set_idf(self, rankings: list["Rankings"]) -> None:
        """The answerer's lexical idf for this batch's question words, from the live chunks' word
        df gathered over every segment (the same values one idf over all chunk texts gives)."""
        if not (isinstance(self.answerer, SentenceAnswerer) and self.cfg.answer.lexical_idf):
            return
        n = self.num_docs
        idf: dict[str, float] = {}
        for r in rankings:
            for w, c in (r.word_df or {}).items():
                idf[w] = float(np.log((n + 1) / (c + 0.5)))
        self.answerer.idf = idf
        self.answerer.idf_max = float(np.log((n + 1) / 0.5))

    def answer(self, texts: list[str], candidates: list[list[Candidate]], qvecs: np.ndarray):
        """The configured answerer; the extractive one reuses the question vectors of retrieval
        and the index-time sentence vectors, so a batch costs one model call."""
        if isinstance(self.answerer, SentenceAnswerer):
            return self.answerer.answer(texts, candidates, cache=self.sentence_vectors, qvecs=qvecs)
        return self.answerer.answer(texts, candidates, cache=self.sentence_vectors)

    def _trace(self, r: "Rankings", head: list[Candidate], ms: dict, question: str = "",
               read: Optional[list[Candidate]] = None) -> dict:
        """The question's lists; `context` is what the answerer read (`read`: the reranked head,
        then the fused tail a call question reads definitions from)."""
        nos = sorted({c for c, _ in r.dense[:20] + r.bm25[:20] + r.fused[:20]})
        ids = dict(zip(nos, self.segments.column("chunk_id", nos)))

        def ranked(pairs, n=20):
            return [[ids[c], round(s, 6)] for c, s in pairs[:n]]
        n_ctx = self.cfg.answer.top_chunks
        if isinstance(self.answerer, SentenceAnswerer) and self.answerer.p.answer_model is not None:
            n_ctx = self.answerer.p.read_chunks  # the fitted selection reads the head of the list
        elif isinstance(self.answerer, SentenceAnswerer) and self.answerer.p.call_chunks and question_form(question) == "call":
            n_ctx = max(n_ctx, self.answerer.p.call_chunks)  # a call question also reads further definitions
        return {"dense": ranked(r.dense), "bm25": ranked(r.bm25), "fused": ranked(r.fused),
                "reranked": [[c.chunk_id, round(float(c.final_score), 6)] for c in head],
                "context": [{"chunk_id": c.chunk_id, "doc_id": c.doc_id, "context": c.context,
                             "text": c.text, "dense_cosine": _round(c.dense_cosine),
                             "bm25_coverage": _round(c.bm25_coverage)} for c in (read or head)[:n_ctx]],
                "ms_per_question": ms}


class _LazyEmbedder:
    """An Embedder made on first use: the answer side of a scattered job gets the question
    vectors with the hits, and loads the model only when a reranker or a chunk without stored
    sentence vectors needs it."""

    def __init__(self, spec: ModelSpec):
        self._spec, self._real = spec, None

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        if self._real is None:
            self._real = Embedder(self._spec)
        return getattr(self._real, name)


class QAEngine(AnswerSide):
    """A whole version in one process: every segment's searcher plus the answer side. The one
    code path behind `ragbeam eval`, the publish gate, and the answer job on a one-segment index;
    the answer job over several segments runs the same searchers and gather as Beam steps."""

    def __init__(self, version_dir: str, cfg, spec: ModelSpec, embedder: Optional[Embedder] = None,
                 manifest: Optional[dict] = None):
        super().__init__(version_dir, cfg, spec, embedder, manifest)  # manifest: the one a driver read
        self.searchers = [open_searcher(self.segments, i, cfg) for i in range(len(self.segments))]
        self.masks = _GlobalMasks(self.searchers)

    @property
    def con(self):
        """DuckDB over the version's chunk rows (a `chunks` view with chunk_no), for tools and
        tests that ask in SQL; the rows stay memory-mapped Arrow, nothing is copied."""
        if getattr(self, "_rows_con", None) is None:
            import duckdb
            import pyarrow as pa
            t = pa.concat_tables([s.seg.rows for s in self.searchers])
            t = t.append_column("chunk_no", pa.array(np.arange(t.num_rows), pa.int32()))
            self._rows_con = duckdb.connect()
            self._rows_con.register("chunks", t)
        return self._rows_con

    def close(self) -> None:
        if getattr(self, "_rows_con", None) is not None:
            self._rows_con.close()
        super().close()

    def chunk_texts(self, chunk_ids) -> dict[str, str]:
        """chunk_id -> text for the ids asked (e.g. a judge's cited sources), read from each
        segment's memory-mapped rows; an id no segment holds is left out."""
        import pyarrow as pa
        import pyarrow.compute as pc
        wanted = pa.array(sorted(set(chunk_ids)), pa.string())
        out: dict[str, str] = {}
        for s in self.searchers:
            rows = s.seg.rows
            hit = rows.filter(pc.is_in(rows.column("chunk_id"), value_set=wanted))
            out.update(zip(hit.column("chunk_id").to_pylist(), hit.column("text").to_pylist()))
        return out

    @property
    def doc_ids(self) -> np.ndarray:
        """chunk_no -> doc_id over the whole version (evaluation's document rankings)."""
        return np.array([d for s in self.searchers for d in s.seg.rows.column("doc_id").to_pylist()], dtype=object)

    def allowed(self, questions: list[Question]) -> np.ndarray:
        """Each question's ACL/filter mask over the whole version (one shared mask when all are alike)."""
        masks = [self.masks.get(q.acl, q.filters) for q in questions]
        return masks[0] if all(m is masks[0] for m in masks) else np.stack(masks)

    def search(self, texts: list[str], allowed=None, qvecs: Optional[np.ndarray] = None, *,
               dense_n: Optional[int] = None, bm25_n: Optional[int] = None,
               access: Optional[list] = None) -> list["Rankings"]:
        """First stage per question over every segment: dense and BM25 top lists (filters applied
        inside each search), gathered and fused. `allowed`: masks over the whole version (given by
        evaluation), else `access` (acl groups, filters) per question, else public only."""
        from transforms.query.segment_search import gather
        rc = self.cfg.retrieve
        if qvecs is None:
            qvecs = self.query_vectors(texts)
        dense_n, bm25_n = dense_n or rc.dense_top_n, bm25_n or rc.bm25_top_n
        terms, words = self.analyze(texts)
        qn = qvecs / np.clip(np.linalg.norm(qvecs, axis=1, keepdims=True), 1e-12, None)
        per_seg = [s.search(terms, words, qn, dense_n, bm25_n, access=access, allowed=allowed) for s in self.searchers]
        gathered = [gather([hits[j] for hits in per_seg], terms[j], dense_n, bm25_n, self.num_docs)
                    for j in range(len(texts))]
        return self.rankings(gathered, qvecs, terms)

    def retrieve(self, questions: list[Question]) -> list[list[Candidate]]:
        """Fused first-stage candidates per question."""
        return self.candidates(self.search([q.question for q in questions],
                                           access=[(q.acl, q.filters) for q in questions]))

    def run(self, questions: list[Question], top_k: int, *, trace: bool = False,
            allowed=None, qvecs: Optional[np.ndarray] = None) -> list[AnswerRecord]:
        """The whole engine for a batch. `allowed` overrides the questions' own masks
        (evaluation hides gold documents this way)."""
        t = [time.perf_counter()]
        texts = [q.question for q in questions]
        if qvecs is None:
            qvecs = self.query_vectors(texts)
        t.append(time.perf_counter())
        rankings = self.search(texts, allowed, qvecs, access=None if allowed is not None
                               else [(q.acl, q.filters) for q in questions])
        return self.finish(questions, qvecs, rankings, top_k, trace=trace, t=t)

    def answer_batch(self, questions: list[Question], top_k: int, trace: bool = False) -> list[AnswerRecord]:
        return self.run(questions, top_k, trace=trace)


def open_searcher(segments, i: int, cfg):
    """Segment i of a version as a SegmentSearcher under the version's statistics."""
    from transforms.query.segment_search import SegmentSearcher
    df, dead = segments.stats(i)
    return SegmentSearcher(segments.segment(i), int(segments.offsets[i]), df, dead, segments.num_docs,
                           segments.avgdl, k1=cfg.retrieve.bm25_k1 or 1.2, b=cfg.retrieve.bm25_b or 0.75,
                           threads=cfg.retrieve.search_threads or os.cpu_count() or 1,
                           ann_ef_search=ann_ef_search(cfg))


def ann_ef_search(cfg) -> Optional[int]:
    """The HNSW efSearch the first stage searches with (retrieve.mode ann), None for exact search."""
    return cfg.retrieve.hnsw_ef_search if cfg.retrieve.mode == "ann" else None


class _GlobalMasks:
    """Access masks over the whole version: each segment's, side by side."""

    def __init__(self, searchers):
        self.searchers = searchers
        self._cache: dict = {}

    def get(self, acl_groups=None, metadata_filters=None) -> np.ndarray:
        key = (tuple(sorted(set(acl_groups or []))), json.dumps(metadata_filters or {}, sort_keys=True, default=str))
        m = self._cache.get(key)
        if m is None:
            if len(self._cache) >= 256:
                self._cache.clear()
            parts = [s.mask(list(key[0]), metadata_filters) for s in self.searchers]
            m = np.concatenate(parts) if parts else np.zeros(0, bool)
            m.setflags(write=False)
            self._cache[key] = m
        return m


def _round(x: Optional[float]) -> Optional[float]:
    return None if x is None else round(float(x), 6)


@dataclass
class Rankings:
    """One question's first-stage lists, best first, as (chunk_no, score)."""
    dense: list[tuple[int, float]]
    bm25: list[tuple[int, float]]
    fused: list[tuple[int, float]]
    qvec: Optional[np.ndarray] = field(default=None, repr=False)  # the unit question vector
    terms: Optional[list] = field(default=None, repr=False)  # its distinct analysed BM25 terms
    bm25_bound: Optional[float] = None  # its best possible BM25 score (segment_search.gather)
    cos_of: dict = field(default_factory=dict, repr=False)  # chunk_no -> cosine, every gathered hit
    bm25_of: dict = field(default_factory=dict, repr=False)  # chunk_no -> BM25 score, every gathered hit
    word_df: dict = field(default_factory=dict, repr=False)  # question word -> live chunks holding it


def _chat_client(a):
    from transforms.common.chat import llm_client
    from transforms.query.answer import BedrockClient

    if a.kind == "openai":
        return llm_client(a, a.max_tokens, "answer", "for answer.kind: openai")
    if not a.model:
        raise ValueError("answer.model (a Bedrock model id) is required for answer.kind: bedrock")
    return BedrockClient(a.model, region=a.region, timeout=a.timeout_s, max_tokens=a.max_tokens,
                         max_attempts=a.retries + 1)
