"""Second-stage reranking of retrieved candidates: one interface, two implementations.

A candidate is a `records.Candidate` (the chunk row with score and rank). rerank()
returns each list re-ordered as new Candidates (`dataclasses.replace`) carrying
rerank_score, the updated score/rank, and the first-stage values as first_stage_score/_rank.
"""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Optional, Protocol

import numpy as np

from transforms.common.text import embedding_text
from transforms.query.fuse import rrf_fuse
from transforms.common.sentences import split_sentences
from transforms.query.records import Candidate

MAX_SENTENCES_PER_CHUNK = 64  # bounds the encode cost of a pathological chunk


class Reranker(Protocol):
    name: str

    def rerank(self, questions: list[str], candidates: list[list[Candidate]],
               cache: Optional["VectorCache"] = None) -> list[list[Candidate]]:
        ...


class VectorCache:
    """Text -> unit vector, so the reranker and the answerer embed each text once.

    ensure() embeds only texts it has not seen, in a single encode call. The answer
    job keeps one cache across batches (questions hitting the same chunks share
    their sentences) and clears it past `max_entries` to bound memory.
    """

    def __init__(self, max_entries: int = 0, dim: Optional[int] = None):
        self._vec: dict[str, np.ndarray] = {}
        self.max_entries = max_entries  # 0: unbounded (one batch)
        self.encode_calls = 0
        self.dim = dim  # the embedder's ModelSpec.dim, learnt on the first ensure()

    def __contains__(self, text: str) -> bool:
        return text in self._vec

    def __len__(self) -> int:
        return len(self._vec)

    def ensure(self, embedder, texts, queries=()) -> None:
        """Vectors for `texts` (passages: sentences, chunks) and `queries` (questions), in one
        encode call when the profile embeds both alike, else one call per side (a question
        then gets the query prefix; it is kept apart from a sentence with the same words)."""
        spec = getattr(embedder, "spec", None)
        if spec is not None:
            self.dim = spec.dim
        own = bool(queries) and query_side_differs(embedder)
        wanted = {t: (t, "passage") for t in texts}
        wanted.update({(QUERY_KEY + q if own else q): (q, "query" if own else "passage") for q in queries})
        new = {k: v for k, v in wanted.items() if k not in self._vec}
        if not new:
            return
        if self.max_entries and len(self._vec) + len(new) > self.max_entries:
            self._vec.clear()
            new = wanted
        for role, encode in (("passage", embedder.encode), ("query", getattr(embedder, "encode_queries", None))):
            keys = [k for k, (_, r) in new.items() if r == role]
            if not keys:
                continue
            vecs = np.asarray(encode([new[k][0] for k in keys]), dtype=np.float32)
            self.dim = vecs.shape[1]
            self.encode_calls += 1
            self._vec.update(zip(keys, vecs))

    def matrix(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim or 0), dtype=np.float32)
        return np.stack([self._vec[t] for t in texts])

    def query_matrix(self, embedder, questions: list[str]) -> np.ndarray:
        """The vectors ensure(..., queries=questions) made for these questions."""
        own = query_side_differs(embedder)
        return self.matrix([QUERY_KEY + q if own else q for q in questions])


QUERY_KEY = "\x00query\x00"  # a question's key in VectorCache when it is embedded unlike passages


def query_side_differs(embedder) -> bool:
    """Does the embedder's profile embed a question unlike a passage (different prefixes)?"""
    spec = getattr(embedder, "spec", None)
    return spec is not None and getattr(spec, "query_prefix", "") != getattr(spec, "passage_prefix", "")


def candidate_sentences(cand: Candidate, limit: int = MAX_SENTENCES_PER_CHUNK) -> list[str]:
    """The sentences of a chunk's text worth scoring (those with a word in them)."""
    sents = [s for s in split_sentences(cand.text or "") if any(c.isalnum() for c in s)]
    return sents[:limit]


def chunk_embed_text(cand: Candidate) -> str:
    return embedding_text(cand.context or "", cand.text or "")


def _first_stage_rank(cand: Candidate, position: int) -> int:
    r = cand.rank
    return int(r) if r is not None else position + 1


def _reorder(cands: list[Candidate], fused: list[tuple[int, float]],
             rerank_scores: list[float]) -> list[Candidate]:
    out = []
    for new_rank, (idx, score) in enumerate(fused, start=1):
        c = cands[idx]
        out.append(replace(c, first_stage_score=c.score, first_stage_rank=_first_stage_rank(c, idx),
                           rerank_score=float(rerank_scores[idx]), score=float(score), rank=new_rank))
    return out


def fuse_with_first_stage(cands: list[Candidate], rerank_scores: list[float], fusion: str,
                          first_stage_weight: float, rerank_weight: float,
                          rrf_k: int) -> list[Candidate]:
    """Order candidates by the reranker, folded with the first-stage order."""
    n = len(cands)
    if n == 0:
        return []
    by_first = sorted(range(n), key=lambda i: (_first_stage_rank(cands[i], i), i))
    by_rerank = sorted(range(n), key=lambda i: (-rerank_scores[i], i))
    if fusion == "rrf":
        fused = rrf_fuse({"first_stage": by_first, "rerank": by_rerank}, k=rrf_k,
                         weights={"first_stage": first_stage_weight, "rerank": rerank_weight})
    elif fusion == "blend":
        # Min-max the first-stage scores per list: fused RRF and cosine are not on one scale.
        fs = np.array([float(c.score or 0.0) for c in cands])
        span = fs.max() - fs.min()
        fs = (fs - fs.min()) / span if span > 0 else np.zeros(n)
        s = first_stage_weight * fs + rerank_weight * np.asarray(rerank_scores, dtype=float)
        fused = sorted(((i, float(s[i])) for i in range(n)),
                       key=lambda t: (-round(t[1], 12), _first_stage_rank(cands[t[0]], t[0]), t[0]))
    elif fusion == "none":
        fused = [(i, float(rerank_scores[i])) for i in by_rerank]
    else:
        raise ValueError(f"unknown fusion {fusion!r} (rrf | blend | none)")
    return _reorder(cands, fused, rerank_scores)


class SentenceEmbeddingReranker:
    """Rescore each chunk by its best-matching sentences under the embedding model.

    A chunk's first-stage vector averages all its sentences; the one sentence that
    answers the question is diluted by the rest. Scoring sentences separately
    recovers it. score = agg(top cosines) (+ chunk_weight * chunk cosine), then
    fused with the first-stage order (RRF by default, rerank weighted above the
    first stage so a clear sentence match can move a chunk up).
    """
    name = "embedding"

    def __init__(self, embedder, first_stage_weight: float = 0.5, rerank_weight: float = 1.0,
                 rrf_k: int = 60, fusion: str = "rrf", top_sentences: int = 1,
                 chunk_weight: float = 0.0):
        if top_sentences < 1:
            raise ValueError("top_sentences must be >= 1")
        self.embedder = embedder
        self.first_stage_weight = first_stage_weight
        self.rerank_weight = rerank_weight
        self.rrf_k = rrf_k
        self.fusion = fusion
        self.top_sentences = top_sentences  # 1 = max, 2 = mean of the top two, ...
        self.chunk_weight = chunk_weight

    def scores(self, questions: list[str], candidates: list[list[Candidate]],
               cache: Optional[VectorCache] = None) -> list[list[float]]:
        """Sentence-level relevance of every candidate; one encode call for the batch."""
        cache = cache if cache is not None else VectorCache()
        sents = [[candidate_sentences(c) for c in cands] for cands in candidates]
        texts = []
        for per_q in sents:
            for s in per_q:
                texts.extend(s)
        if self.chunk_weight:  # the index's stored vector when retrieval returned it
            texts.extend(chunk_embed_text(c) for cands in candidates for c in cands
                         if c.embedding is None)
        cache.ensure(self.embedder, texts, queries=list(questions))

        out = []
        for q, cands, per_q in zip(questions, candidates, sents):
            qv = cache.query_matrix(self.embedder, [q])[0]
            row = []
            for c, ss in zip(cands, per_q):
                if ss:
                    cos = np.sort(cache.matrix(ss) @ qv)[::-1]
                    s = float(cos[:self.top_sentences].mean())
                else:
                    s = 0.0
                if self.chunk_weight:
                    cv = c.embedding
                    cv = (np.asarray(cv, dtype=np.float32) if cv is not None
                          else cache.matrix([chunk_embed_text(c)])[0])
                    ccos = float(cv @ qv)
                    s = (s + self.chunk_weight * ccos) / (1.0 + self.chunk_weight)
                row.append(s)
            out.append(row)
        return out

    def rerank(self, questions: list[str], candidates: list[list[Candidate]],
               cache: Optional[VectorCache] = None) -> list[list[Candidate]]:
        _check_batch(questions, candidates)
        all_scores = self.scores(questions, candidates, cache)
        return [fuse_with_first_stage(c, s, self.fusion, self.first_stage_weight,
                                      self.rerank_weight, self.rrf_k)
                for c, s in zip(candidates, all_scores)]


class OnnxCrossEncoderReranker:
    """A cross-encoder (ms-marco-MiniLM, bge-reranker) exported to ONNX with Optimum.

    model_dir holds model.onnx and tokenizer.json. Each (question, passage) pair is
    pair-encoded ([CLS] q [SEP] p [SEP], token types 0/1), truncated longest-first
    to max_length, and scored; candidates are sorted by the relevance logit.
    """
    name = "cross_encoder"

    def __init__(self, model_dir: str, batch_size: int = 32, max_length: int = 512,
                 intra_op_threads: int = 0, include_context: bool = True,
                 fusion: str = "none", first_stage_weight: float = 0.0,
                 rerank_weight: float = 1.0, rrf_k: int = 60):
        import onnxruntime as ort
        from tokenizers import Tokenizer

        d = Path(model_dir)
        model_path = d / "model.onnx"
        if not model_path.exists():
            raise FileNotFoundError(f"cross-encoder model not found: {model_path}")
        opts = ort.SessionOptions()
        if intra_op_threads:
            opts.intra_op_num_threads = intra_op_threads
        self.session = ort.InferenceSession(str(model_path), sess_options=opts,
                                            providers=["CPUExecutionProvider"])
        self.inputs = {i.name: i for i in self.session.get_inputs()}
        missing = {"input_ids", "attention_mask"} - set(self.inputs)
        if missing:
            raise ValueError(f"{model_path} lacks inputs {sorted(missing)}")
        # The exported tokenizer.json may carry fixed padding/truncation (MiniLM's pads to
        # 128): use our own instance, not the shared cached one, and set both here.
        self.tokenizer = Tokenizer.from_file(str(d / "tokenizer.json"))
        self.max_length = min(max_length, _model_max_length(d) or max_length)
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(self.max_length, strategy="longest_first")
        pad = self.tokenizer.token_to_id("[PAD]")
        if pad is None:
            pad = self.tokenizer.token_to_id("<pad>")
        self.pad_id = pad if pad is not None else 0
        self.batch_size = batch_size
        self.include_context = include_context
        self.fusion = fusion
        self.first_stage_weight = first_stage_weight
        self.rerank_weight = rerank_weight
        self.rrf_k = rrf_k

    def passage(self, cand: Candidate) -> str:
        return chunk_embed_text(cand) if self.include_context else (cand.text or "")

    def feeds(self, pairs: list[tuple[str, str]]) -> dict[str, np.ndarray]:
        """The model inputs for a batch of (question, passage) pairs, padded to the longest."""
        encs = self.tokenizer.encode_batch(pairs, add_special_tokens=True)
        seq = max(len(e.ids) for e in encs)
        ids = np.full((len(encs), seq), self.pad_id, dtype=np.int64)
        mask = np.zeros((len(encs), seq), dtype=np.int64)
        types = np.zeros((len(encs), seq), dtype=np.int64)
        for row, e in enumerate(encs):
            n = len(e.ids)
            ids[row, :n], mask[row, :n], types[row, :n] = e.ids, e.attention_mask, e.type_ids
        feeds = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self.inputs:
            feeds["token_type_ids"] = types
        for name, arr in feeds.items():  # some exports declare int32 inputs
            if self.inputs[name].type == "tensor(int32)":
                feeds[name] = arr.astype(np.int32)
        return feeds

    def score_pairs(self, pairs: list[tuple[str, str]]) -> np.ndarray:
        if not pairs:
            return np.zeros(0, dtype=np.float32)
        lengths = [len(q) + len(p) for q, p in pairs]
        order = sorted(range(len(pairs)), key=lambda i: lengths[i])  # less padding per batch
        out = np.zeros(len(pairs), dtype=np.float32)
        for start in range(0, len(order), self.batch_size):
            idx = order[start:start + self.batch_size]
            logits = self.session.run(None, self.feeds([pairs[i] for i in idx]))[0]
            out[idx] = relevance_logit(np.asarray(logits), len(idx))
        return out

    def rerank(self, questions: list[str], candidates: list[list[Candidate]],
               cache: Optional[VectorCache] = None) -> list[list[Candidate]]:
        _check_batch(questions, candidates)
        pairs = [(q, self.passage(c)) for q, cands in zip(questions, candidates) for c in cands]
        flat = self.score_pairs(pairs)
        out, pos = [], 0
        for cands in candidates:
            s = [float(x) for x in flat[pos:pos + len(cands)]]
            pos += len(cands)
            out.append(fuse_with_first_stage(cands, s, self.fusion, self.first_stage_weight,
                                             self.rerank_weight, self.rrf_k))
        return out


def relevance_logit(logits: np.ndarray, batch: int) -> np.ndarray:
    """(b,), (b, 1) -> the logit; (b, 2) -> log-odds of the 'relevant' class (column 1)."""
    if logits.ndim == 1 or (logits.ndim == 2 and logits.shape[1] == 1):
        return logits.reshape(batch).astype(np.float32)
    if logits.ndim == 2 and logits.shape[1] == 2:
        # l1 - l0 orders pairs exactly as softmax P(relevant) does; l1 alone does not.
        return (logits[:, 1] - logits[:, 0]).astype(np.float32)
    raise ValueError(f"unexpected cross-encoder output shape {logits.shape}")


def _model_max_length(d: Path) -> Optional[int]:
    """max_position_embeddings from config.json, when the export kept it."""
    try:
        cfg = json.loads((d / "config.json").read_text())
        return int(cfg["max_position_embeddings"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


class NoReranker:
    """Keeps the first-stage order; still adds rerank_score so outputs look alike."""
    name = "none"

    def rerank(self, questions: list[str], candidates: list[list[Candidate]],
               cache: Optional[VectorCache] = None) -> list[list[Candidate]]:
        _check_batch(questions, candidates)
        out = []
        for cands in candidates:
            fs = [float(c.score or 0.0) for c in cands]
            order = sorted(range(len(cands)), key=lambda i: (_first_stage_rank(cands[i], i), i))
            out.append(_reorder(cands, [(i, fs[i]) for i in order], fs))
        return out


def _check_batch(questions, candidates) -> None:
    if len(questions) != len(candidates):
        raise ValueError(f"{len(questions)} questions but {len(candidates)} candidate lists")


def make_reranker(kind: str, **kwargs) -> Reranker:
    """kind: "embedding" (needs embedder=) | "cross_encoder" (needs model_dir=) | "none"."""
    if kind == "embedding":
        if "embedder" not in kwargs:
            from transforms.ingest.embed import Embedder, default_model_spec
            kwargs["embedder"] = Embedder(default_model_spec())
        return SentenceEmbeddingReranker(**kwargs)
    if kind == "cross_encoder":
        return OnnxCrossEncoderReranker(**kwargs)
    if kind == "none":
        return NoReranker()
    raise ValueError(f"unknown reranker {kind!r} (embedding | cross_encoder | none)")
