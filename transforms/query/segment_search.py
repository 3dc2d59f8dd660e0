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

Approximate dense search (retrieve.mode ann, `ann_ef_search`): a segment built with an HNSW
graph (index.ann: hnsw) finds each question's dense candidates with one faiss search of the
batch, the rows a question may not see (access rules, filters, tombstones) excluded inside the
graph walk (an IDSelectorBitmap), or, where few rows are allowed, by the exact product over those
rows alone (ANN_EXACT_BELOW). Everything after the candidates (float64 re-scoring, BM25, hits,
gather, fusion) is the exact path's.
"""
from __future__ import annotations

import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from transforms.index.segments import Segment
from transforms.query.retrieve import build_filter_mask

MARGIN = 8  # extra dense rows re-scored in float64: float32 near-ties at the cut cannot drop one
_SCORE_BLOCK = 1 << 25  # floats per (questions x rows) score block
_POST_BLOCK = 1 << 22  # postings weighed at a time (bounds the float64 temporaries)
_LONG_TERM = 4096  # postings from which a term is weighed as a slice, not gathered
SPARSE_FRACTION = 16  # a question with fewer postings than n / this sums them sorted, else densely
# ann: a question that may see fewer than this fraction of a segment's rows is searched exactly over
# them (a product over those rows alone); above it the HNSW walk skips the hidden rows. Measured on
# a realistic 250k segment, efSearch 64 (bench/studies/ann_filter_cut.py, docs/benchmarks.md): the
# filtered walk costs ~0.17 ms a question at any share, but its recall@10 falls from 0.875
# unfiltered to 0.79 / 0.69 / 0.48 with 10 / 5 / 2% of the rows allowed, while the product over the
# allowed rows costs that share of the full one (0.35-0.46 ms at 10%), recall 1.
ANN_EXACT_BELOW = 0.1


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
    statistics (weighed per term on first use: a batch costs the postings of its own terms),
    masks for access rules with tombstones folded in."""

    def __init__(self, seg: Segment, offset: int, df: np.ndarray, dead: np.ndarray, num_docs: int,
                 avgdl: float, k1: float = 1.2, b: float = 0.75, threads: int = 1,
                 ann_ef_search: Optional[int] = None):
        self.seg, self.offset, self.n = seg, int(offset), seg.n
        self.threads = max(1, int(threads))
        # ann: the segment's HNSW graph answers the dense candidates (None: exact, the default;
        # a segment built without a graph is searched exactly whatever this says)
        self.ann_ef_search = int(ann_ef_search) if ann_ef_search and seg.has_ann() else None
        self._ann = None
        self.live = np.ones(seg.n, bool)
        self.live[np.asarray(dead, np.int64)] = False
        self._dead = np.asarray(dead, np.int64)
        self.vectors = seg.vectors  # unit rows, memory-mapped
        self.post_ptr = np.asarray(seg.post_ptr)
        self.post_doc = seg.post_doc
        self._idf = bm25_idf(num_docs, df)
        self._k1 = k1
        doc_len = np.asarray(seg.doc_len, np.float64)
        self._norm = k1 * (1 - b + b * doc_len / avgdl) if avgdl else np.full(seg.n, k1, np.float64)
        n_terms = len(self.post_ptr) - 1
        self.post_w = np.zeros(len(self.post_doc), np.float32)  # zero pages: committed as terms are weighed
        self._weighed = np.zeros(n_terms, bool)
        self._term_max = np.zeros(n_terms, np.float64)
        self._vocab: Optional[SortedStrings] = None
        self._word_df: Optional[tuple] = None  # (SortedStrings of words, their df, dead rows' words)
        self._masks: dict[tuple, np.ndarray] = {}
        self._local = threading.local()  # a BM25 sum buffer per searching thread

    # --- lazily read: a batch pays for what it touches -------------------------------------

    @property
    def vocab(self) -> "SortedStrings":
        """term -> term id (row of the sorted vocabulary)."""
        if self._vocab is None:
            self._vocab = SortedStrings(self.seg.terms().column("term"))
        return self._vocab

    def word_counts(self, words: list[str]) -> dict:
        """word -> live chunks holding it, for these content words (those some live chunk holds)."""
        if self._word_df is None:
            t = self.seg.words()
            dead: Counter = Counter()
            if len(self._dead):  # the answerer's word df counts live chunks only
                from transforms.common.words import content_words
                for text in self.seg.rows.column("text").take(self._dead).to_pylist():
                    dead.update(content_words(text or ""))
            self._word_df = (SortedStrings(t.column("word")), np.asarray(t.column("df")), dead)
        index, df, dead = self._word_df
        ids = index.ids(words)
        out = {}
        for w, i in zip(words, ids.tolist()):
            c = (int(df[i]) if i >= 0 else 0) - dead.get(w, 0)
            if c > 0:
                out[w] = c
        return out

    @property
    def term_max(self) -> np.ndarray:
        """Every term's best weight in the live rows (weighs the whole segment: tests, studies)."""
        self.weigh(np.arange(len(self._weighed)))
        return self._term_max

    def weigh(self, term_ids) -> None:
        """BM25 weights of these terms' postings (once per term), float32, tombstoned rows 0, and
        each term's best weight. The same values whichever terms are weighed together."""
        t = np.unique(np.asarray(term_ids, np.int64))
        t = t[~self._weighed[t]]
        if not len(t):
            return
        ptr = self.post_ptr
        lens = ptr[t + 1] - ptr[t]
        short, long_ = t[lens < _LONG_TERM], t[lens >= _LONG_TERM]
        # rare terms gathered together (a slice each would cost more than its postings), in
        # groups of about _POST_BLOCK postings
        group = np.cumsum(lens[lens < _LONG_TERM]) // _POST_BLOCK
        for g in np.unique(group):
            self._weigh_terms(short[group == g])
        cut = np.flatnonzero(np.diff(long_) != 1) + 1  # runs of consecutive ids: contiguous postings
        for run in np.split(long_, cut) if len(long_) else []:
            i = 0
            while i < len(run):  # spans of at most _POST_BLOCK postings (a longer term alone)
                fits = int(np.searchsorted(ptr[run[i] + 1:run[-1] + 2], ptr[run[i]] + _POST_BLOCK, side="right"))
                j = i + max(1, fits)
                self._weigh_span(int(run[i]), int(run[j - 1]))
                i = j
        self._weighed[t] = True

    def _weigh_terms(self, t: np.ndarray) -> None:
        """Weights of the postings of terms t (ids ascending), gathered."""
        ptr = self.post_ptr
        lens = ptr[t + 1] - ptr[t]
        offs = _ranges(ptr[t], lens)
        self._weigh_postings(offs, np.repeat(self._idf[t], lens), lens, t)

    def _weigh_postings(self, offs, idf: np.ndarray, lens: np.ndarray, t: np.ndarray) -> None:
        """post_w at offs (a slice or positions; idf per posting), and term_max of the terms t
        whose postings, in order, they are (lens each)."""
        k1 = self._k1
        docs = np.asarray(self.post_doc[offs])
        tf = np.asarray(self.seg.post_tf[offs], np.float64)
        blk = idf * tf * (k1 + 1) / (tf + self._norm[docs])
        if len(self._dead):
            blk[~self.live[docs]] = 0.0  # a tombstoned row weighs nothing (and is masked out)
        w = blk.astype(np.float32)
        self.post_w[offs] = w
        has = lens > 0
        if has.any():
            starts = np.concatenate([[0], np.cumsum(lens)[:-1]])
            self._term_max[t[has]] = np.maximum.reduceat(w, starts[has])

    def _weigh_span(self, t0: int, t1: int) -> None:
        """Weights of terms t0..t1 (consecutive ids, so one slice of the postings)."""
        ptr = self.post_ptr
        lens = np.diff(ptr[t0:t1 + 2])
        self._weigh_postings(slice(int(ptr[t0]), int(ptr[t1 + 1])), np.repeat(self._idf[t0:t1 + 1], lens), lens,
                             np.arange(t0, t1 + 1))

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
        self.weigh(term_ids)
        return postings_sum(self.post_ptr, self.post_doc, self.post_w, term_ids, rows)

    # --- search ---------------------------------------------------------------------------

    def search(self, terms: list[list[str]], words: list[set], qvecs: np.ndarray, dense_n: int, bm25_n: int,
               access: Optional[list] = None, allowed: Optional[np.ndarray] = None) -> list[SegmentHits]:
        """terms: each question's distinct analysed BM25 terms; words: its content words; qvecs:
        unit question vectors; access: (acl groups, filters) per question, or `allowed` masks.
        With threads > 1, groups of questions are searched side by side (each question's result
        is computed the same way whatever its group)."""
        q = np.asarray(qvecs, np.float32)
        b = len(q)
        mask = self._allowed(access or [(None, None)] * b, allowed)
        distinct = sorted({t for ts in terms for t in ts})
        id_of = dict(zip(distinct, self.vocab.ids(distinct).tolist()))  # -1: not in this segment
        tids = [np.array(sorted(id_of[t] for t in ts if id_of[t] >= 0), np.int64) for ts in terms]
        wdf = self.word_counts(sorted({w for ws in words for w in ws}))
        if tids:
            self.weigh(np.concatenate(tids))
        hidden = np.flatnonzero(~mask) if mask.ndim == 1 else None  # rows no question of the batch sees
        d_rows = self.dense_top(q, dense_n + MARGIN, mask, hidden)

        def group(sl: slice) -> list[SegmentHits]:
            m = mask if mask.ndim == 1 else mask[sl]
            bm = self.bm25_top(tids[sl], bm25_n, m, d_rows[sl], hidden)
            return self.hits(q[sl], d_rows[sl], bm, terms[sl], words[sl], dense_n, m, id_of, wdf)
        return [h for part in self._map(group, b) for h in part]

    def _map(self, fn, b: int) -> list:
        """fn over contiguous groups of the b questions: one group, or one per thread (each at
        least MIN_GROUP questions)."""
        ways = max(1, min(self.threads, b // MIN_GROUP))
        if ways == 1:
            return [fn(slice(0, b))]
        step = -(-b // ways)
        return list(_pool(self.threads).map(fn, [slice(lo, lo + step) for lo in range(0, b, step)]))

    def dense_top(self, q: np.ndarray, k: int, mask: np.ndarray, hidden: Optional[np.ndarray] = None) -> np.ndarray:
        """(b, k) local rows: each question's k best float32 cosines among its allowed rows
        (any order; -1 past the allowed rows). One matrix product per block of questions,
        straight off the memory-mapped float32 vectors (BLAS threads); the top k of each row
        by the searcher's threads."""
        from transforms.query.retrieve import top_rows
        if self.ann_ef_search:
            return self.dense_ann(q, k, mask, hidden)
        b = len(q)
        out = np.empty((b, k), np.int64)
        vt = np.asarray(self.vectors).T
        if mask.ndim == 1 and hidden is None:
            hidden = np.flatnonzero(~mask)
        step = max(1, _SCORE_BLOCK // max(self.n, 1))
        for lo in range(0, b, step):
            rows = slice(lo, lo + step)
            scores = q[rows] @ vt
            if mask.ndim == 2:
                np.copyto(scores, -np.inf, where=~mask[rows])
            elif len(hidden):
                scores[:, hidden] = -np.inf

            def top(sl: slice, scores=scores, lo=lo) -> None:
                out[lo + sl.start:lo + sl.stop] = top_rows(scores[sl], k)
            self._map(top, len(scores))
        return out

    def ann_graph(self):
        """The segment's HNSW graph with its vectors (loaded on first use; faiss searches on this
        searcher's thread count)."""
        if self._ann is None:
            import faiss
            self._ann = self.seg.ann_index()
            faiss.omp_set_num_threads(self.threads)
        return self._ann

    def dense_ann(self, q: np.ndarray, k: int, mask: np.ndarray, hidden: Optional[np.ndarray] = None) -> np.ndarray:
        """dense_top by the HNSW graph: (b, k) local rows, -1 where fewer were found. The questions
        sharing a mask are searched together, in one faiss call; rows outside the mask are never
        returned (skipped inside the graph walk, or, when fewer than ANN_EXACT_BELOW of the rows
        are allowed, the exact product runs over the allowed rows alone)."""
        import faiss
        from transforms.query.retrieve import top_rows
        b = len(q)
        out = np.full((b, k), -1, np.int64)
        if mask.ndim == 1:
            groups = [(np.arange(b), mask, hidden if hidden is not None else np.flatnonzero(~mask))]
        else:
            packed = np.packbits(mask, axis=1)
            _, inv = np.unique(packed, axis=0, return_inverse=True)
            inv = np.asarray(inv).ravel()
            groups = []
            for g in np.unique(inv):
                rows = np.flatnonzero(inv == g)
                groups.append((rows, mask[rows[0]], np.flatnonzero(~mask[rows[0]])))
        for rows, m, hid in groups:
            allowed = self.n - len(hid)
            if allowed <= 0:
                continue
            qs = np.ascontiguousarray(q[rows], dtype=np.float32)
            if allowed < ANN_EXACT_BELOW * self.n or allowed <= k:
                keep = np.flatnonzero(m)
                scores = qs @ np.asarray(self.vectors[keep], np.float32).T
                top = top_rows(scores, min(k, len(keep)))
                got = np.where(top >= 0, keep[np.clip(top, 0, None)], -1)
                out[rows, :got.shape[1]] = got
                continue
            params = faiss.SearchParametersHNSW()
            params.efSearch = max(self.ann_ef_search, k)
            if len(hid):
                bits = np.packbits(m, bitorder="little")  # row i allowed: bit i of the bitmap
                sel = faiss.IDSelectorBitmap(self.n, faiss.swig_ptr(bits))
                params.sel = sel
            _, labels = self.ann_graph().search(qs, k, params=params)
            labels = np.asarray(labels, np.int64)
            valid = labels >= 0
            valid[valid] = m[labels[valid]]  # never a hidden row, whatever the graph returns
            out[rows] = np.where(valid, labels, -1)
        return out

    def bm25_top(self, tids: list[np.ndarray], top_n: int, mask: np.ndarray, d_rows: np.ndarray,
                 hidden: Optional[np.ndarray] = None) -> list["_BM25Sums"]:
        """Per question: its top_n allowed rows by (-BM25, row), sorted by row, and the BM25 of
        those and of its dense candidates (d_rows[j]) for the hits. Its terms are weighed;
        hidden: the rows no question may see, when the mask is one for all."""
        shared = (hidden if hidden is not None else np.flatnonzero(~mask)) if mask.ndim == 1 else None
        out = []
        for j, t in enumerate(tids):
            m, hidden = (mask, shared) if shared is not None else (mask[j], np.flatnonzero(~mask[j]))
            out.append(_BM25Sums(self, t, m, hidden, top_n, d_rows[j]))
        return out

    def _sum_buffer(self) -> np.ndarray:
        """n float64 zeros, reused (each question leaves it zeroed)."""
        buf = getattr(self._local, "buf", None)
        if buf is None:
            buf = self._local.buf = np.zeros(self.n, np.float64)
        return buf

    def hits(self, q: np.ndarray, d_rows: np.ndarray, bm: list["_BM25Sums"], terms, words,
             dense_n: int, mask: np.ndarray, id_of: dict, wdf_all: dict) -> list[SegmentHits]:
        """Each question's SegmentHits: its dense candidates re-scored in float64 and cut to
        dense_n by (-cosine, row), its BM25 top, both scores of every chunk in either."""
        out = []
        off = self.offset
        tmax = self._term_max
        for j in range(len(q)):
            q64 = q[j].astype(np.float64)
            m = mask if mask.ndim == 1 else mask[j]
            d = d_rows[j][d_rows[j] >= 0]
            d = d[m[d]]
            br = bm[j].top
            both = np.union1d(d, br)
            bcos = self.cosines(both, q64)
            dcos = bcos[np.searchsorted(both, d)]
            order = np.lexsort((d, -dcos))[:dense_n]
            d, dcos = d[order], dcos[order]
            cand = np.union1d(d, br)
            ccos = bcos[np.searchsorted(both, cand)]
            cbm = bm[j].at(cand)
            bscore = cbm[np.searchsorted(cand, br)]
            order = np.lexsort((br, -bscore))
            br, bscore = br[order], bscore[order]
            tm = {t: float(tmax[id_of[t]]) for t in terms[j] if id_of[t] >= 0 and tmax[id_of[t]] > 0}
            wdf = {w: wdf_all[w] for w in words[j] if w in wdf_all}
            out.append(SegmentHits(d + off, dcos, br + off, bscore, cand + off, ccos, cbm, tm, wdf))
        return out


class SortedStrings:
    """Row numbers in a sorted Arrow string column (a segment's vocabulary or words), found by
    binary search over a fixed-width byte copy: opening it costs no Python object per row.
    Strings longer than WIDTH bytes (a few per thousand) sit in a dict."""
    WIDTH = 32

    def __init__(self, col):
        import pyarrow as pa
        import pyarrow.compute as pc
        arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
        arr = pc.cast(arr, pa.large_binary())
        n = len(arr)
        offs = np.frombuffer(arr.buffers()[1], np.int64, n + 1, arr.offset * 8)
        data = np.frombuffer(arr.buffers()[2], np.uint8) if arr.buffers()[2] is not None else np.zeros(0, np.uint8)
        lens = np.diff(offs)
        short = lens <= self.WIDTH
        self.rows = np.flatnonzero(short)
        padded = np.concatenate([data[offs[0]:offs[-1]], np.zeros(self.WIDTH, np.uint8)])
        windows = np.lib.stride_tricks.sliding_window_view(padded, self.WIDTH)
        mat = windows[offs[:-1][self.rows] - offs[0]]  # each string's bytes and what follows it
        mat[np.arange(self.WIDTH)[None, :] >= lens[self.rows][:, None]] = 0  # ... cut to its length
        self.keys = np.ascontiguousarray(mat).view(f"S{self.WIDTH}").ravel()
        self.long = {arr[int(i)].as_py().decode("utf-8"): int(i) for i in np.flatnonzero(~short)}

    def ids(self, strings) -> np.ndarray:
        """Row number of each string, -1 where absent."""
        enc = [x.encode("utf-8") for x in strings]
        out = np.full(len(enc), -1, np.int64)
        if not enc:
            return out
        fits = np.array([len(e) <= self.WIDTH for e in enc], bool)
        q = np.array([e if f else b"" for e, f in zip(enc, fits)], dtype=f"S{self.WIDTH}")
        pos = np.clip(np.searchsorted(self.keys, q), 0, max(len(self.keys) - 1, 0))
        if len(self.keys):
            hit = fits & (self.keys[pos] == q) & (q != b"")
            out[hit] = self.rows[pos[hit]]
        for k in np.flatnonzero(~fits):
            out[k] = self.long.get(strings[k], -1)
        return out

    def __getitem__(self, s: str) -> int:
        i = int(self.ids([s])[0])
        if i < 0:
            raise KeyError(s)
        return i

    def __contains__(self, s: str) -> bool:
        return int(self.ids([s])[0]) >= 0

    def get(self, s: str, default=None):
        i = int(self.ids([s])[0])
        return default if i < 0 else i


MIN_GROUP = 8  # questions per thread at least: fewer are not worth a hand-over

_POOLS: dict[int, ThreadPoolExecutor] = {}
_POOLS_LOCK = threading.Lock()


def _pool(threads: int) -> ThreadPoolExecutor:
    """One pool per thread count per process, shared by its searchers (numpy releases the GIL in
    the array work, so the threads run side by side)."""
    with _POOLS_LOCK:
        p = _POOLS.get(threads)
        if p is None:
            p = _POOLS[threads] = ThreadPoolExecutor(threads, thread_name_prefix="segment-search")
        return p


def _ranges(starts: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """The concatenation of arange(s, s + l) for each (s, l)."""
    lens = np.asarray(lens, np.int64)
    total = int(lens.sum())
    if not total:
        return np.zeros(0, np.int64)
    return np.repeat(np.asarray(starts, np.int64) - np.cumsum(lens) + lens, lens) + np.arange(total)


class _BM25Sums:
    """One question's BM25 over one segment: the float64 sum of its terms' weights at each row
    they reach, the terms added in id order (the order postings_sum and bincount add in). A
    question reaching many rows sums term by term into a dense buffer (the postings are read
    as contiguous slices); one reaching few sums its postings sorted by row. Kept afterwards:
    its top rows and the sums of the rows a caller may ask (`wanted`: its dense candidates)."""

    def __init__(self, s: SegmentSearcher, tids: np.ndarray, m: np.ndarray, hidden: np.ndarray, top_n: int,
                 wanted: np.ndarray):
        lo, hi = s.post_ptr[tids], s.post_ptr[tids + 1]
        if int((hi - lo).sum()) * SPARSE_FRACTION < s.n:
            offs = _ranges(lo, hi - lo)
            rows, inv = np.unique(np.asarray(s.post_doc[offs], np.int64), return_inverse=True)
            sums = np.bincount(inv, weights=s.post_w[offs].astype(np.float64), minlength=len(rows))
            keep = m[rows]
            self.top = _top_by_score(rows[keep], sums[keep], top_n)
            self.rows, self.sums = rows, sums
            return
        acc = s._sum_buffer()
        for a, z in zip(lo.tolist(), hi.tolist()):
            acc[s.post_doc[a:z]] += s.post_w[a:z]
        acc[hidden] = 0.0  # never read again: the rows kept below are all visible ones
        self.top = _top_of_dense(acc, top_n)
        self.rows = np.union1d(self.top, wanted[wanted >= 0])
        self.sums = acc[self.rows]
        acc.fill(0.0)

    def at(self, rows: np.ndarray) -> np.ndarray:
        """The sums at local `rows` (0.0 where no term reaches; rows asked must be top or wanted
        rows when the sums were dense)."""
        out = np.zeros(len(rows), np.float64)
        if len(self.rows):
            pos = np.clip(np.searchsorted(self.rows, rows), 0, len(self.rows) - 1)
            hit = self.rows[pos] == rows
            out[hit] = self.sums[pos[hit]]
        return out


def _top_by_score(rows: np.ndarray, sums: np.ndarray, top_n: int) -> np.ndarray:
    """The top_n of (row, sum) pairs by (-sum, row), sorted by row."""
    if len(rows) > top_n:
        top = np.argpartition(-sums, top_n - 1)[:top_n]
        # the cut may split a tie: take every row scoring as the last kept one
        cut = sums[top].min()
        top = np.flatnonzero(sums >= cut)
        top = top[np.lexsort((rows[top], -sums[top]))][:top_n]
        rows = rows[top]
    return np.sort(rows)


def _top_of_dense(vals: np.ndarray, top_n: int) -> np.ndarray:
    """The top_n rows with a positive value by (-value, row), sorted by row: the top_n-th value
    found by bucket maxima (retrieve.top_rows), then every row reaching it (ties complete)."""
    from transforms.query.retrieve import top_rows
    k = min(top_n, len(vals))
    if not k:
        return np.zeros(0, np.int64)
    cols = top_rows(vals[None, :], k)[0]
    cut = float(vals[cols[cols >= 0]].min()) if (cols >= 0).any() else 0.0
    rows = np.flatnonzero(vals >= cut) if cut > 0 else np.flatnonzero(vals > 0)
    return _top_by_score(rows, vals[rows], top_n)


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
    return Gathered(list(zip(dn[o].tolist(), dc[o].tolist())), list(zip(bn[ob].tolist(), bs[ob].tolist())),
                    dict(zip(cn.tolist(), cc.tolist())), dict(zip(cn.tolist(), cb.tolist())), bound, wdf)
