"""Immutable index segments: one slice of a version's chunks, ready to search memory-mapped.

A segment is a directory `INDEX/segments/<segment id>/` that every version listing it shares:

  rows.arrow         display columns of its chunks (Arrow IPC, uncompressed: memory-maps), sorted
                     by chunk_id; a chunk's row number here is its local number
  vectors.npy        float32 (n, dim) unit chunk vectors
  sent_ptr.npy       int64 (n+1): chunk i's sentences are rows sent_ptr[i]:sent_ptr[i+1]
  sent_start.npy / sent_end.npy   int32 char offsets of each sentence in the chunk text
  sent_vec.npy       int8 (m, dim) index-time sentence vectors (transforms/ingest/sentvec.py)
  sent_has.npy       bool (n): the chunk has stored sentence vectors
  terms.arrow        BM25 vocabulary, sorted (term id = row), with each term's df in the segment
  post_ptr.npy       int64 (T+1); post_doc.npy int32 / post_tf.npy int32: term-major postings,
                     local numbers ascending within a term
  doc_len.npy        int32 (n): analysed length of each chunk (BM25 length normalisation)
  words.arrow        content words of the chunk texts (the answerer's lexical idf), with df
  ids.arrow          the chunk_id column alone
  keys.arrow         its summary for the nightly: each document key (content_hash + doc_id) with the
                     local rows holding it, sorted by key (segments built before it have none)
  hnsw.faiss         optional (index.ann: hnsw): faiss HNSW graph over vectors.npy, inner product,
                     written without its vectors (the searcher attaches vectors.npy's)
  segment.json       id, counts, format and the sha256 of every file above; written last

Corpus-wide statistics (BM25 df, N, average length) are not in a segment: they depend on
every live segment of a version, so the version holds them (transforms/index/segment_stats.py).
The id is content-derived: sha256 over the format, the model namespace, the analysis (BM25
analyzer and content words: analysis_fingerprint), the ANN settings where a graph is built
(AnnSpec.fingerprint) and every row's chunk_id and displayed values, so the same rows always give
the same segment, and a changed tokenizer, stemmer, stopword list or graph setting a new one.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections import Counter
import time
from dataclasses import dataclass
from typing import Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from transforms.common.errors import ActionableError
from transforms.common.words import content_words, content_words_fingerprint
from transforms.index.bm25 import ANALYZER_VERSION, Analyzer, analyzer_fingerprint

SEGMENT_FORMAT = "seg-v1"
SEGMENTS_DIR = "segments"
META_FILE = "segment.json"
BM25_STEMMER = "porter"
ROW_COLUMNS = ("chunk_id", "doc_id", "text", "context", "title", "heading_path", "page", "source_uri",
               "acl", "metadata")
_ARRAYS = ("vectors", "sent_ptr", "sent_start", "sent_end", "sent_vec", "sent_has", "post_ptr", "post_doc",
           "post_tf", "doc_len")
_TABLES = ("rows", "terms", "words")
IDS_FILE = "ids.arrow"  # the chunk_id column alone (older segments lack it)
KEYS_FILE = "keys.arrow"  # document key -> local rows: what a nightly tombstones from (older segments lack it)
ANALYZE_BLOCK = 20_000  # chunks analysed at a time: bounds the token lists held in Python
ANN_FILE = "hnsw.faiss"  # optional HNSW graph (index.ann: hnsw), stored without its vectors
ANN_FORMAT = "hnsw-v1"  # how the graph is built and stored; part of the segment id where a graph is built


@dataclass(frozen=True)
class AnnSpec:
    """An approximate-search graph to build with a segment (index.ann: hnsw): faiss IndexHNSWFlat,
    inner product over the unit vectors, built on one thread (the same rows give the same bytes)."""
    m: int = 32
    ef_construction: int = 80

    def fingerprint(self) -> str:
        return f"{ANN_FORMAT}:m{self.m}:efc{self.ef_construction}"


def ann_spec(index_cfg) -> Optional[AnnSpec]:
    """The AnnSpec an IndexConfig asks for (None: no graph, the default)."""
    if getattr(index_cfg, "ann", "none") != "hnsw":
        return None
    return AnnSpec(int(index_cfg.hnsw_m), int(index_cfg.hnsw_ef_construction))


def ann_fingerprint_of(meta: dict) -> Optional[str]:
    """The AnnSpec fingerprint a segment was built with (None: no graph)."""
    ann = meta.get("ann")
    return ann.get("fingerprint") if isinstance(ann, dict) else None


def build_hnsw(vectors: np.ndarray, spec: AnnSpec):
    """The faiss HNSW graph of unit float32 vectors (one OpenMP thread while it builds)."""
    import faiss
    v = np.ascontiguousarray(vectors, dtype=np.float32)
    index = faiss.IndexHNSWFlat(int(v.shape[1]), spec.m, faiss.METRIC_INNER_PRODUCT)
    index.hnsw.efConstruction = spec.ef_construction
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        if len(v):
            index.add(v)
    finally:
        faiss.omp_set_num_threads(before)
    return index


@dataclass
class SegmentRows:
    """The rows one segment is built from: display columns, chunk vectors and sentence arrays,
    all in the same (chunk_id) order."""
    rows: pa.Table  # ROW_COLUMNS
    vectors: np.ndarray  # float32 (n, dim)
    sent_ptr: np.ndarray
    sent_start: np.ndarray
    sent_end: np.ndarray
    sent_vec: np.ndarray  # int8 (m, dim)
    sent_has: np.ndarray
    keys: Optional[pa.Array] = None  # each row's document key (shard_store.row_keys), None where unknown

    @property
    def n(self) -> int:
        return self.rows.num_rows

    @classmethod
    def from_chunk_table(cls, t: pa.Table) -> "SegmentRows":
        """From chunk_schema rows (Parquet shards); sentence columns may be missing (older shards)."""
        from transforms.ingest.sentvec import SentenceStore
        col = t.column("embedding").combine_chunks()
        flat = np.asarray(col.flatten().to_numpy(zero_copy_only=False), np.float32)
        dim = col.type.list_size if pa.types.is_fixed_size_list(col.type) else (len(flat) // max(len(col), 1))
        vecs = flat.reshape(len(col), dim)  # DuckDB hands FLOAT[dim] back as a plain list
        if "sentence_vectors" in t.column_names:
            s = SentenceStore.from_arrow(t.column("sentence_starts").combine_chunks(),
                                         t.column("sentence_ends").combine_chunks(),
                                         t.column("sentence_vectors").combine_chunks())
            ptr, start, end, svec, has = s.ptr, s.start, s.end, s.vec, s.has_vectors
            if svec.shape[1] != dim:  # no sentence vectors at all: an empty (0, 1) matrix
                svec = np.zeros((0, dim), np.int8)
        else:
            ptr, start, end = np.zeros(len(col) + 1, np.int64), np.zeros(0, np.int32), np.zeros(0, np.int32)
            svec, has = np.zeros((0, dim), np.int8), np.zeros(len(col), bool)
        keys = None
        if "content_hash" in t.column_names and "doc_id" in t.column_names:
            from transforms.index.shard_store import row_keys
            keys = row_keys("chunks", t)
        return cls(t.select(list(ROW_COLUMNS)), vecs, ptr, start, end, svec, has, keys)

    def take(self, idx: np.ndarray) -> "SegmentRows":
        idx = np.asarray(idx, np.int64)
        counts = (self.sent_ptr[idx + 1] - self.sent_ptr[idx]).astype(np.int64)
        srows = np.concatenate([np.arange(self.sent_ptr[i], self.sent_ptr[i + 1]) for i in idx]) \
            if len(idx) else np.zeros(0, np.int64)
        srows = srows.astype(np.int64)
        return SegmentRows(self.rows.take(pa.array(idx)), np.asarray(self.vectors[idx], np.float32),
                           np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
                           np.asarray(self.sent_start[srows]), np.asarray(self.sent_end[srows]),
                           np.asarray(self.sent_vec[srows]), np.asarray(self.sent_has[idx]),
                           self.keys.take(pa.array(idx)) if self.keys is not None else None)

    @staticmethod
    def concat(parts: list["SegmentRows"]) -> "SegmentRows":
        """Rows of several sources in one chunk_id order (a merge or a new segment)."""
        parts = [p for p in parts if p.n]
        if len(parts) == 1:
            whole = parts[0]
        else:
            offs = np.cumsum([0] + [int(p.sent_ptr[-1]) for p in parts[:-1]])
            whole = SegmentRows(
                pa.concat_tables([p.rows for p in parts]),
                np.concatenate([p.vectors for p in parts]),
                np.concatenate([[0]] + [p.sent_ptr[1:] + o for p, o in zip(parts, offs)]).astype(np.int64),
                np.concatenate([p.sent_start for p in parts]), np.concatenate([p.sent_end for p in parts]),
                np.concatenate([p.sent_vec for p in parts]), np.concatenate([p.sent_has for p in parts]),
                pa.concat_arrays([p.keys for p in parts]) if all(p.keys is not None for p in parts) else None)
        order = np.asarray(pc.sort_indices(whole.rows.column("chunk_id")), np.int64)
        if len(order) and (order == np.arange(len(order))).all():
            return whole
        return whole.take(order)


def analysis_fingerprint() -> str:
    """Every analysis that shapes a segment's files besides its rows: the BM25 analyzer (terms,
    postings, lengths) and the content words (words.arrow)."""
    return f"{analyzer_fingerprint(BM25_STEMMER)}.{content_words_fingerprint()}"


def segment_id(rows: pa.Table, namespace: str, ann: Optional[AnnSpec] = None) -> str:
    """Content-derived: the same rows under the same model, analysis and graph settings give the
    same id (a segment without a graph keeps the id it had before graphs existed)."""
    head = f"{SEGMENT_FORMAT}|{namespace}|{analysis_fingerprint()}" + (f"|{ann.fingerprint()}" if ann else "")
    h = hashlib.sha256(f"{head}\n".encode())
    for lo in range(0, rows.num_rows, 10_000):  # a slice at a time: no Python copy of every row at once
        part = rows.slice(lo, 10_000)
        cols = [part.column(c).to_pylist() for c in ROW_COLUMNS]
        for values in zip(*cols):
            h.update(json.dumps(values, separators=(",", ":"), ensure_ascii=False).encode())
            h.update(b"\n")
    return h.hexdigest()[:32]


def _blocks(rows: pa.Table, column: str, with_context: bool = False):
    """(offset, texts) a block at a time: "context\ntext" (what BM25 indexes) or one column."""
    for lo in range(0, rows.num_rows, ANALYZE_BLOCK):
        part = rows.slice(lo, ANALYZE_BLOCK)
        texts = pc.fill_null(part.column(column), "").to_pylist()
        if with_context:
            ctx = pc.fill_null(part.column("context"), "").to_pylist()
            texts = [c + "\n" + t for c, t in zip(ctx, texts)]
        yield lo, texts


def _postings(analyzer: Analyzer, rows: pa.Table):
    """(sorted terms, term df, post_ptr, post_doc, post_tf, doc_len) of the rows, analysed in blocks."""
    vocab: dict[str, int] = {}
    keys_parts, tf_parts = [], []
    n = rows.num_rows
    doc_len = np.zeros(n, np.int32)
    for lo, texts in _blocks(rows, "text", with_context=True):
        docs = analyzer.analyze(texts)
        ids, doc_of = [], []
        for j, toks in enumerate(docs):
            doc_len[lo + j] = len(toks)
            for t in toks:
                i = vocab.get(t)
                if i is None:
                    i = vocab[t] = len(vocab)
                ids.append(i)
            doc_of.append(len(toks))
        tid = np.asarray(ids, np.int64)
        dno = np.repeat(np.arange(lo, lo + len(docs), dtype=np.int64), doc_of)
        keys, tf = np.unique(tid * n + dno, return_counts=True)
        keys_parts.append(keys)
        tf_parts.append(tf.astype(np.int32))
    terms = np.array(sorted(vocab), dtype=object)
    remap = np.empty(len(vocab), np.int64)  # first-seen id -> sorted id
    remap[np.array([vocab[t] for t in terms], np.int64)] = np.arange(len(terms))
    keys = np.concatenate(keys_parts) if keys_parts else np.zeros(0, np.int64)
    tf = np.concatenate(tf_parts) if tf_parts else np.zeros(0, np.int32)
    term = remap[keys // n] if len(keys) else keys
    doc = (keys % n).astype(np.int32)
    order = np.lexsort((doc, term))
    term, doc, tf = term[order], doc[order], tf[order]
    df = np.bincount(term, minlength=len(terms)).astype(np.int32)
    ptr = np.concatenate([[0], np.cumsum(df)]).astype(np.int64)
    return terms, df, ptr, doc, tf, doc_len


def _word_df(rows: pa.Table) -> tuple[list[str], np.ndarray]:
    df: Counter = Counter()
    for _, texts in _blocks(rows, "text"):
        for t in texts:
            df.update(content_words(t))
    words = sorted(df)
    return words, np.array([df[w] for w in words], np.int32)


def write_segment(seg: SegmentRows, segments_root: str, namespace: str, con=None,
                  ann: Optional[AnnSpec] = None) -> dict:
    """Build the segment of `seg` under segments_root/<id>/ (a local dir) and return its meta;
    with `ann`, its HNSW graph too (hnsw.faiss).

    An existing complete segment of the same id is left as it is (ids are content-derived).
    Written into a temp dir and renamed, segment.json last: readers see it whole or not at all."""
    import duckdb
    sid = segment_id(seg.rows, namespace, ann)
    final = os.path.join(segments_root, sid)
    if os.path.exists(os.path.join(final, META_FILE)):
        try:
            check_segment(final)
            return read_meta(final)
        except SegmentCorrupt:  # the same rows were built before and the copy went bad: build again
            shutil.rmtree(final, ignore_errors=True)
    tmp = final + f".tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    own = con is None
    if own:
        from transforms.common.duck import connect
        con = connect(":memory:", memory_limit="256MB")
    try:
        terms, df, ptr, doc, tf, doc_len = _postings(Analyzer(con, BM25_STEMMER), seg.rows)
        words, wdf = _word_df(seg.rows)
    finally:
        if own:
            con.close()
    vec = np.asarray(seg.vectors, np.float32)
    norms = np.linalg.norm(vec, axis=1, keepdims=True)
    vec = vec / np.where(norms == 0, 1, norms)  # stored unit: a cosine is one dot product
    arrays = {"vectors": vec, "sent_ptr": seg.sent_ptr.astype(np.int64), "sent_start": seg.sent_start.astype(np.int32),
              "sent_end": seg.sent_end.astype(np.int32), "sent_vec": seg.sent_vec.astype(np.int8),
              "sent_has": seg.sent_has.astype(bool), "post_ptr": ptr, "post_doc": doc, "post_tf": tf,
              "doc_len": doc_len}
    for name, a in arrays.items():
        np.save(os.path.join(tmp, name + ".npy"), a)
    ann_meta = None
    if ann is not None:
        import faiss
        t0 = time.process_time()
        graph = build_hnsw(vec, ann)
        faiss.write_index(graph, os.path.join(tmp, ANN_FILE), faiss.IO_FLAG_SKIP_STORAGE)
        del graph
        ann_meta = {"kind": "hnsw", "fingerprint": ann.fingerprint(), "file": ANN_FILE, "m": ann.m,
                    "ef_construction": ann.ef_construction, "metric": "inner_product"}
        build_cpu_s = round(time.process_time() - t0, 2)
    tables = {"rows": seg.rows,
              "terms": pa.table({"term": pa.array(list(terms), pa.string()), "df": pa.array(df, pa.int32())}),
              "words": pa.table({"word": pa.array(words, pa.string()), "df": pa.array(wdf, pa.int32())})}
    for name, t in tables.items():
        with pa.OSFile(os.path.join(tmp, name + ".arrow"), "wb") as sink:
            with pa.ipc.new_file(sink, t.schema) as w:
                w.write_table(t.combine_chunks())
    ids = seg.rows.column("chunk_id")
    with pa.OSFile(os.path.join(tmp, IDS_FILE), "wb") as sink:
        with pa.ipc.new_file(sink, pa.schema([("chunk_id", pa.string())])) as w:
            w.write_table(pa.table({"chunk_id": ids}).combine_chunks())
    if seg.keys is not None:
        _write_arrow(os.path.join(tmp, KEYS_FILE), key_rows(seg.keys))
    meta = {"id": sid, "format": SEGMENT_FORMAT, "namespace": namespace, "chunks": seg.n,
            "dim": int(vec.shape[1]), "analyzer": ANALYZER_VERSION, "stemmer": BM25_STEMMER,
            "analysis": analysis_fingerprint(),
            "terms": len(terms), "postings": int(len(doc)), "sentences": int(len(seg.sent_start)),
            "total_len": int(doc_len.sum()),
            **({"ann": ann_meta} if ann_meta else {}),
            "min_chunk_id": pc.min(ids).as_py() if seg.n else None,
            "max_chunk_id": pc.max(ids).as_py() if seg.n else None,
            "files": {f: _sha256(os.path.join(tmp, f)) for f in sorted(os.listdir(tmp))}}
    _fsync_tree(tmp)
    with open(os.path.join(tmp, META_FILE), "w", encoding="utf-8") as f:
        json.dump(meta, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    try:
        os.rename(tmp, final)
    except OSError:  # another worker finished the same (content-derived) segment first
        shutil.rmtree(tmp, ignore_errors=True)
        if not os.path.exists(os.path.join(final, META_FILE)):
            raise
    if ann_meta:  # what the build cost, for the caller (not in segment.json: that stays the same bytes)
        meta = {**meta, "ann_build_cpu_s": build_cpu_s}
    return meta


def key_rows(keys: pa.Array) -> pa.Table:
    """keys.arrow: each distinct key with the local rows holding it (ascending), sorted by key."""
    t = pa.table({"key": keys, "row": pa.array(np.arange(len(keys), dtype=np.int32))})
    # one thread: each list keeps the input's (ascending) row order
    t = t.group_by("key", use_threads=False).aggregate([("row", "list")]).rename_columns(["key", "rows"])
    t = t.sort_by("key")
    return pa.table({"key": t.column("key").combine_chunks().cast(pa.string()),
                     "rows": t.column("rows").combine_chunks().cast(pa.list_(pa.int32()))})


def _write_arrow(path: str, t: pa.Table) -> None:
    with pa.OSFile(path, "wb") as sink:
        with pa.ipc.new_file(sink, t.schema) as w:
            w.write_table(t.combine_chunks())


def _sha256(path: str) -> str:
    from transforms.common.storage import sha256_file
    return sha256_file(path)


def _fsync_tree(d: str) -> None:
    for name in os.listdir(d):
        fd = os.open(os.path.join(d, name), os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def read_meta(segment_dir: str) -> dict:
    with open(os.path.join(segment_dir, META_FILE), encoding="utf-8") as f:
        return json.load(f)


def _read_arrow(path: str) -> pa.Table:
    return pa.ipc.open_file(pa.memory_map(path, "r")).read_all()


class Segment:
    """One segment opened memory-mapped: nothing is read until a search or a row touches it, and a
    file is opened on first use, so a directory holding only some files (the driver's copy of an
    object-storage segment, transforms/index/segment_store.py) serves what needs only those."""

    def __init__(self, segment_dir: str):
        self.dir = segment_dir
        try:
            self.meta = read_meta(segment_dir)
        except (OSError, ValueError) as e:
            raise SegmentCorrupt(f"segment {os.path.basename(segment_dir.rstrip('/'))}: "
                                 f"{os.path.join(segment_dir, META_FILE)} unreadable ({_short(e)}); "
                                 f"{REBUILD_HINT}") from None
        if self.meta.get("format") != SEGMENT_FORMAT:
            raise SegmentFormatError(
                f"segment {self.meta.get('id', os.path.basename(segment_dir))}: "
                f"{os.path.join(segment_dir, META_FILE)} says format {self.meta.get('format')!r}, this ragbeam "
                f"reads {SEGMENT_FORMAT!r}; {REBUILD_HINT}")
        self.id, self.n = self.meta["id"], int(self.meta["chunks"])

    def __getattr__(self, name: str):  # only called for what is not loaded yet
        if name in ("dir", "meta"):
            raise AttributeError(name)
        if name in _ARRAYS:
            value = np.load(os.path.join(self.dir, name + ".npy"), mmap_mode="r")
        elif name == "rows":
            value = _read_arrow(os.path.join(self.dir, "rows.arrow"))
        else:
            raise AttributeError(name)
        setattr(self, name, value)
        return value

    def chunk_ids(self) -> pa.Array:
        """The chunk_id of every row, in row order."""
        path = os.path.join(self.dir, IDS_FILE)
        table = _read_arrow(path) if os.path.exists(path) else self.rows.select(["chunk_id"])
        return table.column("chunk_id").combine_chunks()

    def has_keys(self) -> bool:
        return KEYS_FILE in self.meta.get("files", {}) and os.path.exists(os.path.join(self.dir, KEYS_FILE))

    def rows_of_keys(self, keys: pa.Array) -> Optional[np.ndarray]:
        """The local rows of these document keys (sorted), from keys.arrow alone; None for a
        segment built without it."""
        if not self.has_keys():
            return None
        t = _read_arrow(os.path.join(self.dir, KEYS_FILE))
        if not len(keys) or not t.num_rows:
            return np.zeros(0, np.int64)
        hit = t.column("rows").filter(pc.is_in(t.column("key"), value_set=keys))
        flat = pc.list_flatten(hit.combine_chunks()) if len(hit) else pa.array([], pa.int32())
        return np.unique(np.asarray(flat.to_numpy(zero_copy_only=False), np.int64))

    def row_keys(self) -> Optional[pa.Array]:
        """Every row's document key, in row order (None without keys.arrow)."""
        if not self.has_keys():
            return None
        t = _read_arrow(os.path.join(self.dir, KEYS_FILE))
        rows = t.column("rows").combine_chunks()
        flat = np.asarray(pc.list_flatten(rows).to_numpy(zero_copy_only=False), np.int64)
        parent = pc.list_parent_indices(rows)
        keys = t.column("key").combine_chunks().take(parent)
        return keys.take(pa.array(np.argsort(flat, kind="stable")))

    def has_ann(self) -> bool:
        """The segment was built with an HNSW graph (index.ann: hnsw)."""
        return ann_fingerprint_of(self.meta) is not None and ANN_FILE in self.meta.get("files", {})

    def ann_index(self):
        """Its faiss HNSW graph with this segment's vectors attached (a copy in faiss's memory),
        or None for a segment built without one. A file faiss cannot read is SegmentCorrupt."""
        if not self.has_ann():
            return None
        import faiss
        path = os.path.join(self.dir, ANN_FILE)
        try:
            graph = faiss.read_index(path, faiss.IO_FLAG_SKIP_STORAGE)
        except Exception as e:  # noqa: BLE001 (faiss raises RuntimeError for anything it cannot parse)
            raise SegmentCorrupt(f"segment {self.id}: {path} unreadable ({_short(e)}); {REBUILD_HINT}") from None
        dim = int(self.meta.get("dim") or self.vectors.shape[1])
        if not isinstance(graph, faiss.IndexHNSW) or graph.ntotal != self.n or graph.d != dim:
            raise SegmentCorrupt(f"segment {self.id}: {path} is not an HNSW graph of its {self.n} vectors; "
                                 f"{REBUILD_HINT}")
        flat = faiss.IndexFlatIP(dim)
        if self.n:
            flat.add(np.ascontiguousarray(self.vectors, dtype=np.float32))
        graph.storage = flat
        graph.referenced_objects = [flat]  # the graph does not own it: alive as long as the graph
        return graph

    def terms(self) -> pa.Table:
        return _read_arrow(os.path.join(self.dir, "terms.arrow"))

    def words(self) -> pa.Table:
        return _read_arrow(os.path.join(self.dir, "words.arrow"))

    def sentence_rows(self, i: int) -> slice:
        return slice(int(self.sent_ptr[i]), int(self.sent_ptr[i + 1]))

    def to_rows(self, idx: Optional[np.ndarray] = None) -> SegmentRows:
        """Its rows (or the rows at idx) as a SegmentRows, e.g. to merge into a new segment."""
        whole = SegmentRows(self.rows, self.vectors, self.sent_ptr, self.sent_start, self.sent_end,
                            self.sent_vec, self.sent_has, self.row_keys())
        return whole.take(np.arange(self.n) if idx is None else idx)


REBUILD_HINT = ("run `ragbeam index` on this index again (it rebuilds the segment from the version's rows) "
                "or `ragbeam build-artifacts --index INDEX`")


class SegmentCorrupt(ActionableError):
    """A segment's files do not match the sha256s its segment.json records."""


class SegmentFormatError(ActionableError, ValueError):
    """A segment in a format this ragbeam does not read."""


def _short(e: Exception) -> str:
    return " ".join(str(e).split())[:200]


# Verification. Every segment is hashed whole (every file against segment.json) the first time a
# host opens it; the result is remembered per process and in a per-host marker
# (<cache>/verified/), keyed by each file's size, mtime, ctime and inode. Any write to a file
# moves its ctime (which no tool sets back), so a later open costs one stat per file and a file
# changed, cut or replaced since is hashed again. `full=True` (before a merge) always hashes.
_VERIFIED: dict[str, dict] = {}


def _stat_fp(path: str) -> list:
    st = os.stat(path)
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev]


def _fingerprints(segment_dir: str, names) -> dict:
    return {n: _stat_fp(os.path.join(segment_dir, n)) for n in sorted(set(names) | {META_FILE})}


ENV_CACHE_DIR = "RAGBEAM_INDEX_CACHE_DIR"


def cache_root() -> str:
    """This host's cache of index data: S3 segment copies (segment_store.py), verification markers."""
    return os.environ.get(ENV_CACHE_DIR) or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "ragbeam", "indexes")


def _marker_path(real: str) -> Optional[str]:
    try:
        return os.path.join(cache_root(), "verified", hashlib.sha256(real.encode()).hexdigest()[:32] + ".json")
    except Exception:
        return None


def _read_marker(real: str) -> Optional[dict]:
    path = _marker_path(real)
    try:
        with open(path, encoding="utf-8") as f:  # type: ignore[arg-type]
            got = json.load(f)
        return got["files"] if got.get("path") == real else None
    except (OSError, TypeError, ValueError, KeyError, AttributeError):
        return None


def _write_marker(real: str, fps: dict) -> None:
    path = _marker_path(real)
    if path is None:
        return
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump({"path": real, "files": fps}, f)
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only cache: the per-process memo still holds


def remember_verified(segment_dir: str) -> None:
    """A segment whose sha256s were just computed (write_segment): later opens need only stats."""
    real = os.path.realpath(segment_dir)
    try:
        fps = _fingerprints(real, read_meta(real).get("files", {}))
    except (OSError, ValueError):
        return
    _VERIFIED[real] = fps
    _write_marker(real, fps)


def check_segment(segment_dir: str, full: bool = False) -> None:
    """Raise SegmentCorrupt (one line naming the segment and the file) unless every file of the
    segment matches segment.json; cheap once the host has verified it (see above)."""
    real = os.path.realpath(segment_dir)
    sid = os.path.basename(real)
    try:
        meta = read_meta(real)
    except (OSError, ValueError) as e:
        raise SegmentCorrupt(f"segment {sid}: {os.path.join(segment_dir, META_FILE)} unreadable ({_short(e)}); "
                             f"{REBUILD_HINT}") from None
    files = meta.get("files")
    if not isinstance(files, dict) or not files:
        raise SegmentCorrupt(f"segment {sid}: {os.path.join(segment_dir, META_FILE)} lists no files; {REBUILD_HINT}")
    try:
        fps = _fingerprints(real, files)
    except OSError:
        fps = None
    if not full and fps is not None and (_VERIFIED.get(real) == fps or _read_marker(real) == fps):
        _VERIFIED[real] = fps
        return
    for name, sha in sorted(files.items()):
        p = os.path.join(segment_dir, name)
        if not os.path.exists(p):
            raise SegmentCorrupt(f"segment {sid}: {p} is missing; {REBUILD_HINT}")
        if _sha256(p) != sha:
            raise SegmentCorrupt(f"segment {sid}: {p} ({os.path.getsize(p)} bytes) does not match the sha256 "
                                 f"in {META_FILE} (cut or changed since it was built); {REBUILD_HINT}")
    fps = _fingerprints(real, files)
    _VERIFIED[real] = fps
    _write_marker(real, fps)


def verify_files(segment_dir: str) -> Optional[str]:
    """None when every file hashes to what segment.json records, else what is wrong."""
    try:
        meta = read_meta(segment_dir)
    except (OSError, ValueError) as e:
        return f"no readable {META_FILE}: {e}"
    for name, sha in meta.get("files", {}).items():
        p = os.path.join(segment_dir, name)
        if not os.path.exists(p):
            return f"{name} missing"
        if _sha256(p) != sha:
            return f"{name}: sha256 differs from {META_FILE}"
    return None
