"""Sentence vectors computed at index time and stored with the chunk.

Answering used to embed ~23 candidate sentences per question at query time (90% of the
answer job's time). Here each chunk's sentences get their vectors when the chunk itself
is embedded, so answering needs one model call per question (the question).

Two ways, both producing unit vectors in the chunk embedding's space:

- "late" (late chunking): the chunk (the profile's passage prefix + context prefix + text)
  goes through the model once, as today; each sentence's vector is the mean of the model's
  last hidden states over that sentence's word pieces, L2-normalised (the chunk vector is
  the profile's pooling: the same mean over all tokens, or the [CLS] row). No extra model
  cost; each sentence vector has seen its whole chunk (title, section, the sentences around it).
- "separate": every sentence embedded on its own (one more forward pass per sentence).

Stored per chunk (CHUNK_SCHEMA):
  sentence_starts   list<int32>   char offset of each sentence in `text`
  sentence_ends     list<int32>   char end offset (exclusive)
  sentence_vectors  list<fixed_size_list<int8, dim>>  each vector scaled by 127/max|v|
                                   and rounded; re-normalised when loaded (cosine only
                                   needs the direction, so no scale is stored)
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from transforms.common.sentences import split_sentences

MAX_SENTENCES_PER_CHUNK = 64  # same bound as rerank.candidate_sentences
SENTVEC_VERSION = "late-int8-v1"  # goes into the manifest and the embedding-cache namespace


def sentence_spans(text: str, limit: int = MAX_SENTENCES_PER_CHUNK) -> list[tuple[int, int]]:
    """(start, end) char offsets in `text` of the sentences worth scoring: the sentences of
    split_sentences that hold a letter or digit, in order (= rerank.candidate_sentences)."""
    out: list[tuple[int, int]] = []
    pos = 0
    for s in split_sentences(text or ""):
        i = text.find(s, pos)
        if i < 0:  # split_sentences only strips and slices, so this does not happen
            continue
        pos = i + len(s)
        if any(c.isalnum() for c in s):
            out.append((i, pos))
            if len(out) >= limit:
                break
    return out


def quantize_int8(vecs: np.ndarray) -> np.ndarray:
    """Unit float vectors (n, d) -> int8, each row scaled so its largest |component| is 127."""
    vecs = np.asarray(vecs, np.float32)
    if vecs.size == 0:
        return np.zeros((0, vecs.shape[-1] if vecs.ndim == 2 else 0), np.int8)
    peak = np.abs(vecs).max(axis=1, keepdims=True)
    return np.rint(vecs * (127.0 / np.clip(peak, 1e-12, None))).astype(np.int8)


def dequantize(q: np.ndarray) -> np.ndarray:
    """int8 (or float16) rows -> unit float32 rows."""
    v = np.asarray(q, np.float32)
    n = np.linalg.norm(v, axis=1, keepdims=True)
    return v / np.clip(n, 1e-12, None)


def _token_span(offsets: Sequence[tuple[int, int]], seq_ids: Sequence[Optional[int]],
                start: int, end: int, n_tokens: int) -> tuple[int, int]:
    """Token rows [a, b) whose char span lies in [start, end) (special tokens excluded)."""
    a = b = None
    for t, ((s, e), sid) in enumerate(zip(offsets, seq_ids)):
        if t >= n_tokens:
            break
        if sid is None or e <= s:
            continue
        if s >= start and e <= end:
            if a is None:
                a = t
            b = t + 1
        elif s >= end:
            break
    return (a, b) if a is not None else (0, 0)


def late_encode(embedder, texts: list[str], spans: list[list[tuple[int, int]]],
                batch_size: int = 8) -> tuple[np.ndarray, list[np.ndarray]]:
    """Chunk vectors (exactly Embedder.encode's) plus each listed span's pooled vector.

    texts: what gets embedded (context + "\\n" + text); spans: per text, char spans in
    that string. A span that maps to no token (cannot happen for a sentence with a word
    in it) gets the chunk vector. The profile's passage prefix is put before each text here
    (and the spans shifted past it), as Embedder.encode does.

    Sentence vectors are always the mean of the token states over the sentence's span, also
    for a CLS-pooled model (bge): a sentence has no [CLS] row of its own, and the [CLS] row
    of the chunk is one vector for all its sentences.
    """
    n = len(texts)
    dim = embedder.spec.dim
    chunk = np.zeros((n, dim), np.float32)
    sents: list[np.ndarray] = [np.zeros((len(s), dim), np.float32) for s in spans]
    if not n:
        return chunk, sents
    prefix = len(embedder.prefixed([""], "passage")[0])
    encs = embedder.tokenizer.encode_batch(embedder.prefixed(list(texts), "passage"), add_special_tokens=True)
    order = sorted(range(n), key=lambda i: len(encs[i].ids))  # Embedder.encode's batching
    max_len = embedder.spec.max_length
    for lo in range(0, n, batch_size):
        idx = order[lo:lo + batch_size]
        hidden, mask = embedder.forward([encs[i] for i in idx])
        chunk[idx] = embedder.pool(hidden, mask)
        for row, i in enumerate(idx):
            e = encs[i]
            # Tokens past the limit were dropped (the chunker keeps chunks within it).
            n_tok = min(len(e.ids), max_len - 1)
            for k, (s, t) in enumerate(spans[i]):
                a, b = _token_span(e.offsets, e.sequence_ids, s + prefix, t + prefix, n_tok)
                if b > a:
                    v = hidden[row, a:b].mean(axis=0)
                    sents[i][k] = v / max(float(np.linalg.norm(v)), 1e-12)
                else:
                    sents[i][k] = chunk[i]
    return chunk, sents


def chunk_sentence_vectors(embedder, embed_texts: list[str], texts: list[str],
                           batch_size: int = 8, kind: str = "late"):
    """For chunks (embed_text = context prefix + text): (chunk vectors, spans in `text`,
    sentence vectors per chunk). kind: late | separate."""
    spans = [sentence_spans(t) for t in texts]
    if kind == "late":
        shift = [len(et) - len(t) for et, t in zip(embed_texts, texts)]  # the prefix length
        shifted = [[(s + d, e + d) for s, e in sp] for sp, d in zip(spans, shift)]
        chunk, vecs = late_encode(embedder, embed_texts, shifted, batch_size)
        return chunk, spans, vecs
    if kind == "separate":
        chunk = embedder.encode(embed_texts, batch_size=batch_size)
        flat = [t[s:e] for t, sp in zip(texts, spans) for s, e in sp]
        allv = embedder.encode(flat, batch_size=batch_size) if flat else np.zeros((0, embedder.spec.dim), np.float32)
        out, pos = [], 0
        for sp in spans:
            out.append(allv[pos:pos + len(sp)])
            pos += len(sp)
        return chunk, spans, out
    raise ValueError(f"sentence vector kind {kind!r} (late | separate)")


class SentenceStore:
    """Every chunk's sentence spans and vectors as flat arrays, by chunk_no, loaded once.

    ptr[c]:ptr[c+1] are chunk c's sentence rows; start/end index into the chunk text;
    vec holds the stored int8 rows and inv_norm their inverse norms, so a cosine is
    (vec[rows] @ q) * inv_norm[rows] without ever materialising float32 copies.
    A chunk with no stored sentences (an index built before sentence vectors) has
    has_vectors[c] False; the answerer embeds its sentences at query time instead.
    """

    def __init__(self, ptr: np.ndarray, start: np.ndarray, end: np.ndarray, vec: np.ndarray,
                 has_vectors: np.ndarray):
        self.ptr, self.start, self.end, self.vec = ptr, start, end, vec
        self.has_vectors = has_vectors
        if vec.dtype == np.int8:
            norms = np.linalg.norm(vec.astype(np.float32), axis=1) if len(vec) else np.zeros(0, np.float32)
        else:
            norms = np.linalg.norm(vec.astype(np.float32), axis=1) if len(vec) else np.zeros(0, np.float32)
        self.inv_norm = (1.0 / np.clip(norms, 1e-12, None)).astype(np.float32)

    @property
    def n_chunks(self) -> int:
        return len(self.ptr) - 1

    @classmethod
    def from_lists(cls, spans: list[list[tuple[int, int]]], vecs: list[Optional[np.ndarray]],
                   dtype=np.int8, dim: Optional[int] = None) -> "SentenceStore":
        counts = np.array([len(s) if v is not None else 0 for s, v in zip(spans, vecs)], np.int64)
        ptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        start = np.array([s for sp, v in zip(spans, vecs) if v is not None for s, _ in sp], np.int32)
        end = np.array([e for sp, v in zip(spans, vecs) if v is not None for _, e in sp], np.int32)
        rows = [v for v in vecs if v is not None and len(v)]
        dim = dim or (rows[0].shape[1] if rows else 0)
        mat = np.concatenate(rows) if rows else np.zeros((0, dim), np.float32)
        if dtype == np.int8:
            mat = quantize_int8(mat) if mat.dtype != np.int8 else mat
        else:
            mat = mat.astype(dtype)
        has = np.array([v is not None for v in vecs], bool)
        return cls(ptr, start, end, mat, has)

    @classmethod
    def from_arrow(cls, starts, ends, vectors) -> "SentenceStore":
        import pyarrow as pa
        import pyarrow.compute as pc

        n = len(vectors)
        has = np.asarray(vectors.is_valid().to_numpy(zero_copy_only=False), bool)
        counts = np.asarray(pc.fill_null(pc.list_value_length(vectors), 0).to_numpy(), np.int64)
        ptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        inner = vectors.flatten()  # fixed_size_list<int8, dim> (nulls contribute nothing)
        if pa.types.is_fixed_size_list(inner.type):
            flat = inner.flatten().to_numpy(zero_copy_only=False)
        else:  # DuckDB may hand TINYINT[dim] back as a variable list
            flat = pc.list_flatten(inner).to_numpy(zero_copy_only=False)
        dim = (inner.type.list_size if pa.types.is_fixed_size_list(inner.type)
               else (len(flat) // len(inner) if len(inner) else 1))
        mat = np.asarray(flat).astype(np.int8, copy=False).reshape(-1, max(dim, 1))
        start = np.asarray(pc.list_flatten(starts).to_numpy(zero_copy_only=False), np.int32)
        end = np.asarray(pc.list_flatten(ends).to_numpy(zero_copy_only=False), np.int32)
        if len(start) != len(mat) or len(end) != len(mat) or ptr[-1] != len(mat):
            raise ValueError(f"sentence columns disagree: {len(start)} starts, {len(end)} ends, "
                             f"{len(mat)} vectors over {n} chunks")
        return cls(ptr, start, end, mat, has)

    def rows(self, chunk_no: int) -> slice:
        return slice(int(self.ptr[chunk_no]), int(self.ptr[chunk_no + 1]))

    def cosines(self, rows: np.ndarray, q: np.ndarray) -> np.ndarray:
        """Cosine of each listed sentence row with the unit vector q."""
        if len(rows) == 0:
            return np.zeros(0, np.float32)
        return (self.vec[rows].astype(np.float32) @ q) * self.inv_norm[rows]

    def nbytes(self) -> int:
        return int(self.vec.nbytes + self.start.nbytes + self.end.nbytes + self.ptr.nbytes)
