"""Search one segment, and gather the segments' hits into one ranking per question.

A worker opens a segment memory-mapped (transforms/index/segments.py) with the version's
corpus-wide BM25 statistics and tombstones, and answers a batch of questions with one matrix
product (dense) and one sparse product (BM25). Per question it returns its top lists and, for
every chunk in them, both exact scores (cosine and BM25), the BM25 best weight of each query
term it holds and the df of the question's content words: all the gather step needs to rank,
fuse and bound exactly as one index built whole would.

Determinism across segmentations: scores are recomputed in float64 per (question, chunk)
(a row-wise sum that does not depend on how many rows a segment has); BM25 term ids follow the
sorted vocabulary, so a chunk's terms are summed in the same order in every segment; ties go to
the smaller global number, which is chunk_id order in a version built whole.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from transforms.index.segments import Segment
from transforms.query.retrieve import _topk_dense, build_filter_mask

MARGIN = 8  # extra dense rows re-scored in float64: float32 near-ties at the cut cannot drop one
_SCORE_BLOCK = 1 << 25  # floats per (questions x rows) score block
_POST_BLOCK = 1 << 22  # postings weighed at a time (bounds the float64 temporaries)


@dataclass
class SegmentHits:
    """One question's hits in one segment; chunk numbers are version-global."""
    dense_no: np.ndarray
    dense_cos: np.ndarray
    bm25_no: np.ndarray
    bm25_score: np.ndarray
    cand_no: np.ndarray  # every chunk above, once
    cand_cos: np.ndarray
    cand_bm25: np.ndarray
    term_max: dict = field(default_factory=dict)  # query term -> its best weight in this segment's live rows
    word_df: dict = field(default_factory=dict)  # question content word -> live chunks holding it


def bm25_idf(num_docs: int, df: np.ndarray) -> np.ndarray:
    df = np.asarray(df, np.float64)
    return np.log10((num_docs - df + 0.5) / (df + 0.5) + 1)


class SegmentSearcher:
    """One segment of one version: vectors memory-mapped, BM25 weights under the version's
    statistics, masks for access rules with tombstones folded in."""

    def __init__(self, seg: Segment, offset: int, df: np.ndarray, dead: np.ndarray, num_docs: int,
                 avgdl: float, k1: float = 1.2, b: float = 0.75):
        self.seg, self.offset, self.n = seg, int(offset), seg.n
        self.live = np.ones(seg.n, bool)
        self.live[np.asarray(dead, np.int64)] = False
        self.vectors = seg.vectors  # unit rows, memory-mapped
        terms = seg.terms().column("term").to_pylist()
        self.vocab = {t: i for i, t in enumerate(terms)}
        self.post_ptr = np.asarray(seg.post_ptr)
        self.post_doc = seg.post_doc
        idf = bm25_idf(num_docs, df)
        tf_all, doc_len = seg.post_tf, np.asarray(seg.doc_len, np.float64)
        w = np.empty(len(self.post_doc), np.float32)
        for lo in range(0, len(w), _POST_BLOCK):  # block by block: no corpus-sized float64 temporary
            hi = min(lo + _POST_BLOCK, len(w))
            term = np.searchsorted(self.post_ptr, np.arange(lo, hi), side="right") - 1
            tf = np.asarray(tf_all[lo:hi], np.float64)
            docs = np.asarray(self.post_doc[lo:hi])
            norm = k1 * (1 - b + b * doc_len[docs] / avgdl) if avgdl else k1
            blk = idf[term] * tf * (k1 + 1) / (tf + norm)
            blk[~self.live[docs]] = 0.0  # a tombstoned row weighs nothing (and is masked out)
            w[lo:hi] = blk
        self.post_w = w
        counts = np.diff(self.post_ptr)
        self.term_max = np.zeros(len(counts), np.float64)
        has = counts > 0
        if has.any():
            self.term_max[has] = np.maximum.reduceat(w, self.post_ptr[:-1][has])  # float32: no copy of w
        words = seg.words()
        self.word_df = dict(zip(words.column("word").to_pylist(), words.column("df").to_pylist()))
        if len(dead):  # the answerer's word df counts live chunks only
            from transforms.common.words import content_words
            for text in seg.rows.column("text").take(np.asarray(dead, np.int64)).to_pylist():
                for wd in content_words(text or ""):
                    self.word_df[wd] -= 1
        self._masks: dict[tuple, np.ndarray] = {}

    def mask(self, acl_groups=None, filters=None) -> np.ndarray:
        """bool[n]: rows these access groups and metadata filters may see, tombstones excluded."""
        import json
        key = (tuple(sorted(acl_groups or [])), json.dumps(filters or {}, sort_keys=True))
        m = self._masks.get(key)
        if m is None:
            if len(self._masks) >= 256:
                self._masks.clear()
            m = build_filter_mask(self.seg.rows.select(["chunk_id", "acl", "metadata"]), acl_groups, filters)
            m = m & self.live
            self._masks[key] = m
        return m

    def _allowed(self, access, allowed):
        if allowed is not None:  # given masks (evaluation): this segment's columns of them
            a = np.asarray(allowed)
            sl = a[..., self.offset:self.offset + self.n]
            return sl & self.live
        masks = [self.mask(g, f) for g, f in access]
        return masks[0] if all(m is masks[0] for m in masks) else np.stack(masks)

    def cosines(self, rows: np.ndarray, q64: np.ndarray) -> np.ndarray:
        return (np.asarray(self.vectors[rows], np.float64) * q64).sum(axis=1)

    def bm25_of(self, term_ids: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Exact BM25 of local `rows` for one question's sorted distinct term ids."""
        from transforms.query.fuse import postings_sum
        return postings_sum(self.post_ptr, self.post_doc, self.post_w, term_ids, rows)

    def search(self, terms: list[list[str]], words: list[set], qvecs: np.ndarray, dense_n: int, bm25_n: int,
               access: Optional[list] = None, allowed: Optional[np.ndarray] = None) -> list[SegmentHits]:
        """terms: each question's distinct analysed BM25 terms; words: its content words; qvecs:
        unit question vectors; access: (acl groups, filters) per question, or `allowed` masks."""
        q = np.asarray(qvecs, np.float32)
        b = len(q)
        mask = self._allowed(access or [(None, None)] * b, allowed)
        k = dense_n + MARGIN
        d_i = np.empty((b, k), np.int64)
        step = max(1, _SCORE_BLOCK // max(self.n, 1))
        for lo in range(0, b, step):
            rows = slice(lo, lo + step)
            scores = q[rows] @ np.asarray(self.vectors).T
            m = mask if mask.ndim == 1 else mask[rows]
            np.copyto(scores, -np.inf, where=~m)
            _, d_i[rows] = _topk_dense(scores, k)
        tids = [np.array(sorted(self.vocab[t] for t in ts if t in self.vocab), np.int64) for ts in terms]
        b_rows = self._bm25_top(tids, bm25_n, mask)
        out = []
        for j in range(b):
            q64 = q[j].astype(np.float64)
            m = mask if mask.ndim == 1 else mask[j]
            d = d_i[j][d_i[j] >= 0]
            d = d[m[d]]
            dcos = self.cosines(d, q64)
            order = np.lexsort((d, -dcos))[:dense_n]
            d, dcos = d[order], dcos[order]
            br = b_rows[j]
            cand = np.union1d(d, br)
            ccos = self.cosines(cand, q64)
            cbm = self.bm25_of(tids[j], cand)
            bscore = cbm[np.searchsorted(cand, br)]
            order = np.lexsort((br, -bscore))
            br, bscore = br[order], bscore[order]
            tm = {t: float(self.term_max[self.vocab[t]]) for t in terms[j]
                  if t in self.vocab and self.term_max[self.vocab[t]] > 0}
            wdf = {w: self.word_df[w] for w in words[j] if self.word_df.get(w, 0) > 0}
            off = self.offset
            out.append(SegmentHits(d + off, dcos, br + off, bscore, cand + off, ccos, cbm, tm, wdf))
        return out

    def _bm25_top(self, tids: list[np.ndarray], top_n: int, mask: np.ndarray) -> list[np.ndarray]:
        """Per question the local rows of its BM25 top_n (ties by row), masked rows excluded."""
        lens_q = [len(t) for t in tids]
        qid = np.repeat(np.arange(len(tids)), lens_q)
        terms = np.concatenate(tids) if tids else np.zeros(0, np.int64)
        starts, lens = self.post_ptr[terms], self.post_ptr[terms + 1] - self.post_ptr[terms]
        offs = np.repeat(starts - np.cumsum(lens) + lens, lens) + np.arange(lens.sum())
        docs = np.asarray(self.post_doc[offs], np.int64)
        keys = np.repeat(qid, lens) * self.n + docs
        uniq, inv = np.unique(keys, return_inverse=True)
        sums = np.bincount(inv, weights=self.post_w[offs].astype(np.float64), minlength=len(uniq))
        q_of, doc_of = uniq // self.n, uniq % self.n
        bounds = np.searchsorted(q_of, np.arange(len(tids) + 1))
        out = []
        for j in range(len(tids)):
            dj, sj = doc_of[bounds[j]:bounds[j + 1]], sums[bounds[j]:bounds[j + 1]]
            m = mask if mask.ndim == 1 else mask[j]
            keep = m[dj]
            dj, sj = dj[keep], sj[keep]
            if len(dj) > top_n:
                top = np.argpartition(-sj, top_n - 1)[:top_n]
                # the cut may split a tie: take every row scoring as the last kept one
                cut = sj[top].min()
                top = np.flatnonzero(sj >= cut)
                top = top[np.lexsort((dj[top], -sj[top]))][:top_n]
                dj = dj[top]
            out.append(np.sort(dj))
        return out


def unseen_term_weight(num_docs: int) -> float:
    """A query term no live chunk holds counts in the bound with the idf of a term one chunk holds:
    it is part of what was asked, so a question mostly about something else cannot reach full
    coverage through its one known word."""
    return float(np.log10((num_docs - 1 + 0.5) / (1 + 0.5) + 1))


def merge_hits(a: SegmentHits, b: SegmentHits, dense_n: int, bm25_n: int) -> SegmentHits:
    """Two hit sets of one question as one: each top list cut to its length by (-score, number),
    both scores kept for the chunks that stay, term maxima maxed and word counts summed. Associative
    and commutative (the order the segments come in never matters), so the gather can fold
    segments one at a time and hold one segment's worth of hits per question."""
    def top(nos, scores, n):
        o = np.lexsort((nos, -scores))[:n]
        return nos[o], scores[o]
    dn, dc = top(np.concatenate([a.dense_no, b.dense_no]), np.concatenate([a.dense_cos, b.dense_cos]), dense_n)
    bn, bs = top(np.concatenate([a.bm25_no, b.bm25_no]), np.concatenate([a.bm25_score, b.bm25_score]), bm25_n)
    cn = np.concatenate([a.cand_no, b.cand_no])
    keep = np.isin(cn, np.union1d(dn, bn))
    order = np.argsort(cn[keep], kind="stable")
    tm = dict(a.term_max)
    for t, v in b.term_max.items():
        tm[t] = max(tm.get(t, 0.0), v)
    wdf = dict(a.word_df)
    for w, c in b.word_df.items():
        wdf[w] = wdf.get(w, 0) + c
    return SegmentHits(dn, dc, bn, bs, cn[keep][order], np.concatenate([a.cand_cos, b.cand_cos])[keep][order],
                       np.concatenate([a.cand_bm25, b.cand_bm25])[keep][order], tm, wdf)


@dataclass
class Gathered:
    """One question's first stage over every segment: global lists and both scores of each chunk."""
    dense: list[tuple[int, float]]
    bm25: list[tuple[int, float]]
    cos_of: dict
    bm25_of: dict
    bm25_bound: float
    word_df: dict


def gather(hits: list[SegmentHits], terms: list[str], dense_n: int, bm25_n: int, num_docs: int) -> Gathered:
    """Merge one question's per-segment hits (any order) as one index built whole would rank them."""
    cat = lambda name: np.concatenate([getattr(h, name) for h in hits]) if hits else np.zeros(0)  # noqa: E731
    dn, dc = cat("dense_no").astype(np.int64), cat("dense_cos")
    o = np.lexsort((dn, -dc))[:dense_n]
    bn, bs = cat("bm25_no").astype(np.int64), cat("bm25_score")
    ob = np.lexsort((bn, -bs))[:bm25_n]
    cn, cc, cb = cat("cand_no").astype(np.int64), cat("cand_cos"), cat("cand_bm25")
    tm: dict[str, float] = {}
    wdf: dict[str, int] = {}
    for h in hits:
        for t, v in h.term_max.items():
            tm[t] = max(tm.get(t, 0.0), v)
        for w, c in h.word_df.items():
            wdf[w] = wdf.get(w, 0) + c
    unseen = unseen_term_weight(num_docs)
    bound = 0.0
    for t in sorted(set(terms)):
        bound += tm.get(t, unseen)
    return Gathered([(int(dn[i]), float(dc[i])) for i in o], [(int(bn[i]), float(bs[i])) for i in ob],
                    dict(zip(cn.tolist(), cc.tolist())), dict(zip(cn.tolist(), cb.tolist())), bound, wdf)
