"""Query rewriting: the llm writes more ways to ask, and their vectors are fused with the question's.

- multi_query: n paraphrases of the question, each embedded as a question;
- hyde (Gao et al., "Precise Zero-Shot Dense Retrieval without Relevance Labels"): a short
  hypothetical answer passage, embedded as a passage, since it reads like one.

The fused query vector is question_weight × the question's unit vector plus the rest shared
equally by the rewrites' unit vectors, normalised. BM25 keeps the question's own words: a
paraphrase's words would move the lexical side away from what the user typed. The fused vector
is the question's vector everywhere after (dense search, rerank, answer).

A question whose rewriting fails (the llm down, timed out, or writing nothing usable) keeps its
own vector and is counted (`failed` here, the `rewrite_failed` counter and run summary of
the answer job); rewriting improves recall, it never fails a question.
"""
from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from typing import Optional

import numpy as np

PROMPT_VERSIONS = {"multi_query": "multi_query:1", "hyde": "hyde:1"}
_MULTI_SYSTEM = ("You rewrite search questions. Write {n} different ways to ask the user's question, one per "
                 "line. Keep every name and term of the question. Write nothing else: no numbering, no answer.")
_HYDE_SYSTEM = ("Write a short passage of two or three sentences that answers the user's question, as a "
                "reference document or manual would. Write only the passage.")
_LIST_MARK = re.compile(r"^\s*(?:[-*•]|\d{1,2}[.)]|[a-z][.)])\s+")
_MAX_CHARS = 600  # of one rewrite: a model that rambles is cut, not embedded whole


def parse_paraphrases(reply: str, question: str, n: int) -> list[str]:
    """The reply's lines as paraphrases: list marks stripped, the question itself and repeats dropped."""
    seen = {question.strip().casefold()}
    out = []
    for line in reply.splitlines():
        text = _LIST_MARK.sub("", line).strip().strip('"').strip()
        if len(text) < 3 or text.casefold() in seen or text.endswith(":"):
            continue
        seen.add(text.casefold())
        out.append(text[:_MAX_CHARS])
        if len(out) == n:
            break
    return out


class QueryRewriter:
    """Questions -> their rewrites (a list per question), asked of a chat client concurrently."""

    def __init__(self, client, kind: str, n: int = 3, concurrency: int = 4):
        if kind not in PROMPT_VERSIONS:
            raise ValueError(f"rewrite.kind: unknown {kind!r}; expected one of {sorted(PROMPT_VERSIONS)}")
        self.client, self.kind, self.n, self.concurrency = client, kind, n, max(1, concurrency)
        self.prompt_version = PROMPT_VERSIONS[kind]
        self.failed = 0  # questions left with their own vector
        self.last_error: Optional[str] = None

    def _one(self, question: str) -> list[str]:
        try:
            if self.kind == "multi_query":
                reply = self.client.complete(_MULTI_SYSTEM.format(n=self.n), question.strip())
                out = parse_paraphrases(reply or "", question, self.n)
            else:
                reply = (self.client.complete(_HYDE_SYSTEM, question.strip()) or "").strip()
                out = [reply[:_MAX_CHARS]] if len(reply) >= 3 else []
        except Exception as e:  # noqa: BLE001 -- any failure: the question keeps its own vector
            from transforms.common.redact import redact_text
            self.last_error = redact_text(f"{type(e).__name__}: {e}")
            out = []
        if not out:
            self.failed += 1
        return out

    def rewrites(self, questions: list[str]) -> list[list[str]]:
        if self.concurrency == 1 or len(questions) <= 1:
            return [self._one(q) for q in questions]
        with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
            return list(pool.map(self._one, questions))


def _unit(v: np.ndarray) -> np.ndarray:
    return v / np.clip(np.linalg.norm(v, axis=-1, keepdims=True), 1e-12, None)


class QueryEncoder:
    """Question texts -> unit query vectors: the embedder's, fused with the rewrites' when a
    rewriter is given."""

    def __init__(self, embedder, rewriter: Optional[QueryRewriter] = None, question_weight: float = 0.5):
        self.embedder, self.rewriter, self.question_weight = embedder, rewriter, question_weight

    @property
    def rewrite_failed(self) -> int:
        """Questions so far left with their own vector because rewriting failed (0 without a rewriter)."""
        return self.rewriter.failed if self.rewriter is not None else 0

    def encode(self, texts: list[str]) -> np.ndarray:
        if self.rewriter is None or not texts:
            return self.embedder.encode_queries(texts)  # exactly what the engine always used
        own = _unit(np.asarray(self.embedder.encode_queries(texts), np.float32))
        per_q = self.rewriter.rewrites(texts)
        flat = [t for rw in per_q for t in rw]
        if not flat:
            return own
        role = "query" if self.rewriter.kind == "multi_query" else "passage"
        vecs = _unit(np.asarray(self.embedder.encode(flat, role=role), np.float32))
        out, at = own.copy(), 0
        for j, rw in enumerate(per_q):
            if rw:
                mean = vecs[at:at + len(rw)].mean(axis=0)
                out[j] = _unit(self.question_weight * own[j] + (1 - self.question_weight) * mean)
                at += len(rw)
        return out.astype(np.float32)


def query_encoder(embedder, cfg) -> QueryEncoder:
    """The QueryEncoder the config asks for (rewrite.kind none: the question's vector alone)."""
    rw = cfg.rewrite
    if rw.kind == "none":
        return QueryEncoder(embedder)
    from transforms.common.chat import llm_client
    rewriter = QueryRewriter(llm_client(cfg.llm, rw.max_tokens), rw.kind, rw.n, cfg.llm.concurrency)
    return QueryEncoder(embedder, rewriter, rw.question_weight)
