"""Synthetic index versions of copied chunk rows, their nightly (changed) versions, peak RSS and CPU.

The scale bench's corpus is bench/scale_corpus.py (text re-sampled with a growing vocabulary);
this module keeps the copy corpus (bench/studies/ann_vs_exact.py measures on its vectors; its
distinct terms are the source rows', whatever the size), write_changed_version (the nightly's
carry step, as the index job does it today) and the measured child processes both use.

    python -m bench.scale_data --chunks 100000 --out out/scale/v100k
    python -m bench.scale_data --changed-from out/scale/v100k --fraction 0.01 --out out/scale/v100k-n1
    python -m bench.scale_data --chunks 1000000 --out DIR --source cranfield --overwrite

The rows are real: texts, contexts, titles, sentence spans, token counts and vectors of a real
index of the sample corpus (or of cranfield from ../shared/data), built once with the real
pipeline and cached under out/scale/. Row i of a synthetic version copies source row
i % len(source), with a fresh chunk id (sha256 of "seed:i", 32 hex digits), a synthetic document
(every CHUNKS_PER_DOC consecutive rows: doc_id, content_hash, source_uri, ordinal = place in it),
and its vectors (the chunk's and its sentences', re-quantised to int8) moved by Gaussian noise
and re-normalised; every other column is the source row's. No model runs. Output is a version directory (manifest.json, summary.json,
chunks/, documents/, sources/, dead_letters/) that `resolve_index` accepts as --index, e.g.
`ragbeam build-artifacts --index DIR`; it has no segments until that is run.

Deterministic: the same source rows and arguments give the same bytes of every row (noise is
drawn per aligned block of NOISE_BLOCK rows, so rows_per_file does not change the rows).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from transforms.index.incremental import CARRIED_FILE, SOURCES_DIR
from transforms.index.shards import CHUNKS_DIR, DEAD_LETTERS_DIR, DOCUMENTS_DIR, read_table, shard_files
from transforms.ingest.sentvec import dequantize, quantize_int8
from transforms.records import DEAD_LETTER_SCHEMA, DOCUMENT_SCHEMA, SOURCE_SCHEMA, chunk_schema, embedding_dim

ROOT = Path(__file__).resolve().parent.parent
SCALE_DIR = ROOT / "out" / "scale"
SAMPLE_CORPUS = ROOT / "samples" / "corpus"
CRANFIELD = ROOT.parent / "shared" / "data" / "cranfield"
SOURCE_INDEXES = {"sample": SCALE_DIR / "source-index", "cranfield": SCALE_DIR / "source-index-cranfield"}

ID_LEN = 32  # chunk and document ids: hex digits, as transforms.records.stable_id makes them
CHUNKS_PER_DOC = 4
SIGMA = 0.05  # per component; a unit 384-d vector's components are ~0.05, see sigma_cosine()
NOISE_BLOCK = 1000  # rows per independently seeded noise block (divides ROW_GROUP_ROWS)
ROW_GROUP_ROWS = 5000  # ~the pipeline's row groups (shards.ROW_GROUP_BUFFER_BYTES)
SOURCE_VERSION_KEY = b"ragbeam.scale.source_version"  # schema metadata: where the rows came from
SYNTHETIC_MTIME = 1_700_000_000.0


def _sha(s: str) -> str:
    return hashlib.sha256(s.encode("utf-8")).hexdigest()


def _log(*a) -> None:
    print(*a, file=sys.stderr, flush=True)


# --- source rows ----------------------------------------------------------------------------

def make_source_rows(source: str = "sample", index_dir: Optional[str] = None, config: Optional[str] = None,
                     log=_log) -> pa.Table:
    """The chunk rows of a real index of `source` ("sample": samples/corpus, always there;
    "cranfield": ../shared/data/cranfield/corpus.jsonl), built with the real pipeline into
    `index_dir` (default out/scale/source-index[-cranfield]) unless it already has a live
    version. The table's schema metadata names the version dir (write_synthetic_version copies
    its manifest)."""
    from transforms.index import publish

    if source not in SOURCE_INDEXES:
        raise ValueError(f"source {source!r}: one of {sorted(SOURCE_INDEXES)}")
    index_dir = str(index_dir or SOURCE_INDEXES[source])
    if publish.current_version(index_dir) is None:
        if source == "sample":
            corpus = str(SAMPLE_CORPUS)
        else:
            from bench.data import load_beir, write_corpus
            if not (CRANFIELD / "corpus.jsonl").exists():
                raise FileNotFoundError(f"{CRANFIELD}/corpus.jsonl: no cranfield corpus (use source='sample')")
            corpus = write_corpus(load_beir(CRANFIELD, "cranfield").docs, str(SCALE_DIR / "cranfield-corpus"))
        from configs.schema import load_config
        from pipelines.index import run_index
        log(f"scale_data: indexing {corpus} into {index_dir} (real pipeline, once)")
        t0 = time.perf_counter()
        s = run_index(load_config(config), corpus, index_dir, progress=False, log=lambda *_: None)
        log(f"scale_data: {s['chunks']} chunks of {s['documents']} documents in {time.perf_counter() - t0:.0f} s")
    vdir = publish.resolve_index(index_dir)
    t = read_table(vdir, CHUNKS_DIR)
    return t.replace_schema_metadata({**(t.schema.metadata or {}), SOURCE_VERSION_KEY: vdir.encode()})


class _Source:
    """The source rows in chunk_schema(dim), with their vectors as numpy (unit float32)."""

    def __init__(self, rows: pa.Table):
        if rows.num_rows == 0:
            raise ValueError("no source rows")
        self.dim = embedding_dim(rows.schema)
        self.schema = chunk_schema(self.dim)
        meta = rows.schema.metadata or {}
        self.version_dir = meta.get(SOURCE_VERSION_KEY, b"").decode() or None
        self.table = _conform(rows, self.schema).combine_chunks()
        self.n = self.table.num_rows
        self.emb = _unit(_fixed_to_numpy(self.table.column("embedding").combine_chunks(), np.float32, self.dim))
        sv = self.table.column("sentence_vectors").combine_chunks()
        self.sv_valid = np.asarray(sv.is_valid().to_numpy(zero_copy_only=False), bool)
        self.sv_count = np.asarray(pc.fill_null(pc.list_value_length(sv), 0).to_numpy(), np.int64)
        self.sv_off = np.concatenate([[0], np.cumsum(self.sv_count)]).astype(np.int64)
        self.sv_flat = dequantize(_fixed_to_numpy(sv.flatten(), np.int8, self.dim))
        self.text_bytes = np.asarray(pc.binary_length(self.table.column("text")).to_numpy(zero_copy_only=False),
                                     np.int64)
        self.formats = [_format_of(m) for m in self.table.column("metadata").to_pylist()]
        self.titles = self.table.column("title").to_pylist()
        self.acls = self.table.column("acl").to_pylist()
        self.metadata = self.table.column("metadata").to_pylist()


def _format_of(metadata: Optional[str]) -> str:
    try:
        return str(json.loads(metadata or "{}").get("format") or "text")
    except (ValueError, AttributeError):
        return "text"


def _conform(t: pa.Table, schema: pa.Schema) -> pa.Table:
    """Columns in schema order and types (a shard read back may say timestamp[ms]); missing
    sentence columns (rows from before them) as nulls."""
    for f in schema:
        if f.name not in t.column_names:
            t = t.append_column(f, pa.nulls(t.num_rows, f.type))
    return t.select(schema.names).cast(schema).replace_schema_metadata(None)


def _fixed_to_numpy(arr, dtype, dim: int) -> np.ndarray:
    """fixed_size_list<dtype, dim> (no nulls) -> (n, dim) numpy."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if arr.null_count:
        raise ValueError("null vectors")
    return np.asarray(arr.flatten().to_numpy(zero_copy_only=False), dtype).reshape(-1, dim)


def _unit(v: np.ndarray) -> np.ndarray:
    v = np.asarray(v, np.float32)
    return v / np.clip(np.linalg.norm(v, axis=1, keepdims=True), 1e-12, None)


def _fixed_array(mat: np.ndarray, dim: int) -> pa.FixedSizeListArray:
    return pa.FixedSizeListArray.from_arrays(pa.array(np.ascontiguousarray(mat).reshape(-1)), dim)


def _sentence_array(q: np.ndarray, counts: np.ndarray, valid: np.ndarray, dim: int) -> pa.Array:
    offsets = pa.array(np.concatenate([[0], np.cumsum(counts)]).astype(np.int32))
    return pa.ListArray.from_arrays(offsets, _fixed_array(q, dim), mask=pa.array(~valid))


def sigma_cosine(sigma: float = SIGMA, dim: int = 384) -> float:
    """Expected cosine of a perturbed unit vector to its original: 1 / sqrt(1 + dim sigma^2)."""
    return 1.0 / math.sqrt(1.0 + dim * sigma * sigma)


# --- a synthetic version --------------------------------------------------------------------

def _ids(seed: int, a: int, b: int) -> list[str]:
    return [_sha(f"{seed}:{i}")[:ID_LEN] for i in range(a, b)]


def _doc_id(seed: int, d: int) -> str:
    return _sha(f"{seed}:doc:{d}")[:ID_LEN]


def _doc_hash(seed: int, d: int) -> str:
    return _sha(f"{seed}:content:{d}")


def _doc_key(seed: int, d: int) -> str:
    return f"scale-{seed}/{d // 1000:06d}/doc-{d:09d}.txt"


def _doc_uri(seed: int, d: int) -> str:
    return "/synthetic/" + _doc_key(seed, d)


def _perturbed_block(src: _Source, seed: int, a: int, b: int, sigma: float):
    """Rows [a, b) of the synthetic version: (embeddings (m, dim) float32 unit, sentence
    vectors int8 (S, dim)); the noise is drawn per aligned NOISE_BLOCK, so it does not depend
    on how rows are split into files."""
    dim, B = src.dim, NOISE_BLOCK
    embs, sents = [], []
    for k in range(a // B, (b - 1) // B + 1):
        bs = k * B
        lo, hi = max(a, bs), min(b, bs + B)
        rng = np.random.default_rng([seed, k])
        noise = rng.standard_normal((B, dim), dtype=np.float32)[lo - bs:hi - bs]
        idx = np.arange(lo, hi) % src.n
        embs.append(_unit(src.emb[idx] + sigma * noise))
        cum = np.concatenate([[0], np.cumsum(src.sv_count[np.arange(bs, bs + B) % src.n])])
        s_noise = rng.standard_normal((int(cum[-1]), dim), dtype=np.float32)[cum[lo - bs]:cum[hi - bs]]
        counts = src.sv_count[idx]
        rows = np.repeat(src.sv_off[idx], counts) + (np.arange(int(counts.sum())) -
                                                     np.repeat(np.cumsum(counts) - counts, counts))
        sents.append(quantize_int8(_unit(src.sv_flat[rows] + sigma * s_noise)))
    return np.concatenate(embs), np.concatenate(sents)


def _set(t: pa.Table, name: str, arr) -> pa.Table:
    i = t.schema.get_field_index(name)
    return t.set_column(i, t.schema.field(i), arr)


def _synthetic_rows(src: _Source, seed: int, a: int, b: int, sigma: float, per_doc: int) -> pa.Table:
    idx = np.arange(a, b) % src.n
    t = src.table.take(pa.array(idx))
    d0, d1 = a // per_doc, (b - 1) // per_doc + 1
    doc_of = pa.array(np.arange(a, b) // per_doc - d0)
    uris = pa.array([_doc_uri(seed, d) for d in range(d0, d1)]).take(doc_of)
    t = _set(t, "chunk_id", pa.array(_ids(seed, a, b), pa.string()))
    t = _set(t, "doc_id", pa.array([_doc_id(seed, d) for d in range(d0, d1)]).take(doc_of))
    t = _set(t, "content_hash", pa.array([_doc_hash(seed, d) for d in range(d0, d1)]).take(doc_of))
    t = _set(t, "ordinal", pa.array(np.arange(a, b) % per_doc, pa.int32()))
    t = _set(t, "source_uri", uris)
    t = _set(t, "source_uris", pa.ListArray.from_arrays(pa.array(np.arange(b - a + 1, dtype=np.int32)), uris))
    emb, sv = _perturbed_block(src, seed, a, b, sigma)
    t = _set(t, "embedding", _fixed_array(emb, src.dim))
    t = _set(t, "sentence_vectors", _sentence_array(sv, src.sv_count[idx], src.sv_valid[idx], src.dim))
    return t.cast(src.schema)


def _synthetic_docs(src: _Source, seed: int, n_chunks: int, d0: int, d1: int, per_doc: int):
    """DOCUMENT_SCHEMA and SOURCE_SCHEMA rows of synthetic documents [d0, d1)."""
    docs, sources = [], []
    for d in range(d0, d1):
        first, last = d * per_doc, min(n_chunks, (d + 1) * per_doc)
        s = first % src.n
        size = int(src.text_bytes[np.arange(first, last) % src.n].sum())
        h, uri = _doc_hash(seed, d), _doc_uri(seed, d)
        docs.append({"doc_id": _doc_id(seed, d), "content_hash": h, "source_hash": h, "source_uri": uri,
                     "source_uris": [uri], "key": _doc_key(seed, d), "format": src.formats[s],
                     "title": src.titles[s], "status": "indexed",
                     "chunk_count": last - first, "size": size, "mtime": SYNTHETIC_MTIME,
                     "acl": src.acls[s] or [], "metadata": src.metadata[s] or "{}"})
        sources.append({"uri": uri, "key": _doc_key(seed, d), "size": size, "mtime": SYNTHETIC_MTIME,
                        "content_hash": h, "status": "live", "tombstoned_at": None})
    return pa.Table.from_pylist(docs, DOCUMENT_SCHEMA), pa.Table.from_pylist(sources, SOURCE_SCHEMA)


def _part(i: int, n: int) -> str:
    return f"part-{i:05d}-of-{n:05d}.parquet"  # Beam's WriteToParquet names, as shards.WriteShards writes


def _writer(path: str, schema: pa.Schema) -> pq.ParquetWriter:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    return pq.ParquetWriter(path, schema, compression="zstd")


def _row_groups(path: str, columns: Optional[list[str]] = None):
    """A Parquet file's row groups, one table each: memory stays at one row group
    (ParquetFile.iter_batches reads ahead: ~500 MB held on a 1M-row version)."""
    pf = pq.ParquetFile(path)
    for i in range(pf.num_row_groups):
        yield pf.read_row_group(i, columns=columns)


def _write_file(path: str, table: pa.Table) -> None:
    with _writer(path, table.schema) as w:
        w.write_table(table, row_group_size=ROW_GROUP_ROWS)


def _check_empty(version_dir: str) -> None:
    if os.path.exists(os.path.join(version_dir, "manifest.json")) or shard_files(version_dir, CHUNKS_DIR):
        raise FileExistsError(f"{version_dir}: already holds a version (remove it first)")


def write_synthetic_version(src_rows: pa.Table, version_dir: str, n_chunks: int, seed: int = 0,
                            rows_per_file: int = 50_000, *, sigma: float = SIGMA,
                            chunks_per_doc: int = CHUNKS_PER_DOC, log=None) -> dict:
    """Write a version of n_chunks synthetic rows made from src_rows (chunk_schema rows) at
    version_dir; returns its stats (rows, files, documents, bytes, seconds). chunks/ holds
    ceil(n_chunks / rows_per_file) files, written one at a time; documents/ one file per
    chunks file; sources/sources.parquet; an empty dead_letters/ shard; then summary.json and
    manifest.json (the source version's, counts and version name changed)."""
    if n_chunks < 1 or rows_per_file < 1 or chunks_per_doc < 1:
        raise ValueError("n_chunks, rows_per_file and chunks_per_doc must be >= 1")
    t0 = time.perf_counter()
    _check_empty(version_dir)
    src = _Source(src_rows)
    n_files = math.ceil(n_chunks / rows_per_file)
    n_docs = math.ceil(n_chunks / chunks_per_doc)
    os.makedirs(version_dir, exist_ok=True)
    sources_w = _writer(os.path.join(version_dir, SOURCES_DIR, "sources.parquet"), SOURCE_SCHEMA)
    try:
        for f in range(n_files):
            a, b = f * rows_per_file, min(n_chunks, (f + 1) * rows_per_file)
            with _writer(os.path.join(version_dir, CHUNKS_DIR, _part(f, n_files)), src.schema) as w:
                for g in range(a, b, ROW_GROUP_ROWS):  # made and written a row group at a time
                    w.write_table(_synthetic_rows(src, seed, g, min(b, g + ROW_GROUP_ROWS), sigma, chunks_per_doc))
            # the documents whose first chunk is in this file
            docs, sources = _synthetic_docs(src, seed, n_chunks, -(-a // chunks_per_doc),
                                            -(-b // chunks_per_doc), chunks_per_doc)
            _write_file(os.path.join(version_dir, DOCUMENTS_DIR, _part(f, n_files)), docs)
            sources_w.write_table(sources, row_group_size=50_000)
            if log:
                log(f"scale_data: {b}/{n_chunks} rows ({time.perf_counter() - t0:.1f} s)")
    finally:
        sources_w.close()
    _write_file(os.path.join(version_dir, DEAD_LETTERS_DIR, _part(0, 1)), DEAD_LETTER_SCHEMA.empty_table())
    name = os.path.basename(os.path.normpath(version_dir))
    info = {"source_version": src.version_dir, "source_rows": src.n, "seed": seed, "sigma": sigma,
            "chunks_per_doc": chunks_per_doc, "rows_per_file": rows_per_file}
    counts = {"documents": n_docs, "chunks": n_chunks, "dead_lettered": 0, "duplicates": 0,
              "near_duplicates": 0}
    summary = _summary(src.version_dir, name, counts, {
        "listed": n_docs, "read": n_docs, "unique": n_docs, "parsed": n_docs, "parsed_documents": n_docs,
        "added": n_docs, "embedded": n_chunks, "bytes_read": 0, "previous_version": None}, info)
    _write_outputs(version_dir, _manifest(src.version_dir, src, name, counts, info), summary)
    return {"version_dir": version_dir, "rows": n_chunks, "documents": n_docs, "files": n_files,
            "bytes": dir_bytes(version_dir), "seconds": round(time.perf_counter() - t0, 2)}


def _read_json(path: Optional[str]) -> dict:
    if path and os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    return {}


def _manifest(source_vdir: Optional[str], src: Optional[_Source], name: str, counts: dict, info: dict) -> dict:
    m = _read_json(source_vdir and os.path.join(source_vdir, "manifest.json"))
    if not m.get("model") and src is not None:  # hand-made rows: the model their rows name
        row = src.table.slice(0, 1).to_pylist()[0]
        m["model"] = {"id": row["model_id"], "sha256": row["model_sha256"]}
    m.update(version=name, counts=counts, artifact={}, synthetic=info)  # no segments yet
    return m


def _summary(source_vdir: Optional[str], name: str, counts: dict, changes: dict, info: dict) -> dict:
    s = _read_json(source_vdir and os.path.join(source_vdir, "summary.json"))
    for k, v in list(s.items()):  # per-run counters start at zero
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            s[k] = 0
    s.update({"documents": counts["documents"], "chunks": counts["chunks"], "version": name,
              "input": "synthetic", "artifact": {}, "balanced": True, "reconcile_problems": [],
              "skipped_at_listing": {}, "skipped_at_listing_paths": {}, "synthetic": info})
    s.update(changes)
    return s


def _write_outputs(version_dir: str, manifest: dict, summary: dict) -> None:
    """summary.json, then manifest.json last: a directory without a manifest is no version."""
    for name, data in (("summary.json", summary), ("manifest.json", manifest)):
        tmp = os.path.join(version_dir, name + ".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2, sort_keys=True)
        os.replace(tmp, os.path.join(version_dir, name))


def dir_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(path) for f in fs)


# --- the nightly: a changed version ---------------------------------------------------------

def _perturb_rows(t: pa.Table, rng: np.random.Generator, sigma: float, dim: int) -> tuple[pa.Array, pa.Array]:
    """New embedding and sentence_vectors columns: the rows' own vectors moved by noise."""
    emb = _fixed_to_numpy(t.column("embedding"), np.float32, dim)
    emb = _unit(emb + sigma * rng.standard_normal(emb.shape, dtype=np.float32))
    sv = t.column("sentence_vectors").combine_chunks()
    valid = np.asarray(sv.is_valid().to_numpy(zero_copy_only=False), bool)
    counts = np.asarray(pc.fill_null(pc.list_value_length(sv), 0).to_numpy(), np.int64)
    flat = dequantize(_fixed_to_numpy(sv.flatten(), np.int8, dim))
    q = quantize_int8(_unit(flat + sigma * rng.standard_normal(flat.shape, dtype=np.float32)))
    return _fixed_array(emb, dim), _sentence_array(q, counts, valid, dim)


def write_changed_version(base_version_dir: str, new_version_dir: str, change_fraction: float = 0.01,
                          seed: int = 1, *, sigma: float = SIGMA, rows_per_file: int = 50_000) -> dict:
    """The nightly: a new version at new_version_dir whose rows are the base's, with
    change_fraction of its documents (seeded pick) changed: their chunks get new ids, a new
    content hash and their vectors moved by noise (texts and spans stay). Unchanged chunk rows
    are copied a row group at a time, values untouched, into chunks/carried-00000-of-00001.parquet (the
    pipeline's CARRIED_FILE), the changed rows go to chunks/part-*.parquet; documents/ likewise
    (carried + part), sources/ rewritten with the changed hashes and a later mtime.

    Returns {"removed_chunk_ids", "added_chunk_ids" (added[k] replaces removed[k]),
    "changed_doc_ids", "removed", "added", "carried_chunks", "carried_documents", "bytes", "seconds"}.
    Meant for synthetic bases (one source per document); on a real one it works, but a JSONL file's
    other records keep their old source hash."""
    t0 = time.perf_counter()
    if not 0.0 <= change_fraction <= 1.0:
        raise ValueError("change_fraction must be in [0, 1]")
    _check_empty(new_version_dir)
    base_files = shard_files(base_version_dir, CHUNKS_DIR)
    if not base_files:
        raise FileNotFoundError(f"no chunks shards under {base_version_dir}")
    dim = embedding_dim(pq.read_schema(base_files[0]))
    schema = chunk_schema(dim)

    doc_files = shard_files(base_version_dir, DOCUMENTS_DIR)
    doc_keys = read_table(base_version_dir, DOCUMENTS_DIR, ["doc_id", "content_hash"])
    n_docs = doc_keys.num_rows
    n_change = min(n_docs, max(1, round(change_fraction * n_docs))) if change_fraction > 0 and n_docs else 0
    pick = np.sort(np.random.default_rng([seed, 0]).choice(n_docs, n_change, replace=False))
    changed = doc_keys.take(pa.array(pick, pa.int64()))
    del doc_keys
    changed_ids = changed.column("doc_id").combine_chunks()
    new_hash = {h: _sha(f"{seed}:changed:{h}") for h in changed.column("content_hash").to_pylist()}

    # pass 1, the doc_id column a row group at a time: how many part files the new rows fill
    n_new = sum(int(pc.sum(pc.is_in(g.column("doc_id"), value_set=changed_ids)).as_py() or 0)
                for f in base_files for g in _row_groups(f, ["doc_id"]))
    n_parts = max(1, math.ceil(n_new / rows_per_file))

    # pass 2, a row group at a time: unchanged rows to the carried file, changed ones perturbed to parts
    removed, added = [], []
    out_chunks = os.path.join(new_version_dir, CHUNKS_DIR)
    carried_w = _writer(os.path.join(out_chunks, CARRIED_FILE), schema)
    part_no, part_rows, part_w = 0, 0, None
    carried_chunks = 0
    try:
        for fi, path in enumerate(base_files):
            for bi, t in enumerate(_row_groups(path)):
                t = _conform(t, schema)
                m = pc.is_in(t.column("doc_id"), value_set=changed_ids)
                keep = t.filter(pc.invert(m))
                if keep.num_rows:
                    carried_w.write_table(keep)
                    carried_chunks += keep.num_rows
                ch = t.filter(m)
                del t, keep
                if not ch.num_rows:
                    continue
                old = ch.column("chunk_id").to_pylist()
                new = [_sha(f"{seed}:changed:{c}")[:ID_LEN] for c in old]
                emb, sv = _perturb_rows(ch, np.random.default_rng([seed, 1, fi, bi]), sigma, dim)
                ch = _set(ch, "chunk_id", pa.array(new, pa.string()))
                ch = _set(ch, "content_hash", pa.array([new_hash[h] for h in ch.column("content_hash").to_pylist()],
                                                       pa.string()))
                ch = _set(ch, "embedding", emb)
                ch = _set(ch, "sentence_vectors", sv).cast(schema)
                removed += old
                added += new
                while ch.num_rows:  # fill part files of rows_per_file rows
                    if part_w is None:
                        part_w = _writer(os.path.join(out_chunks, _part(part_no, n_parts)), schema)
                    take = min(ch.num_rows, rows_per_file - part_rows)
                    part_w.write_table(ch.slice(0, take))
                    ch, part_rows = ch.slice(take), part_rows + take
                    if part_rows == rows_per_file:
                        part_w.close()
                        part_w, part_no, part_rows = None, part_no + 1, 0
        if part_w is None and part_no == 0:  # no new rows: one empty shard, as Beam's sink writes
            part_w = _writer(os.path.join(out_chunks, _part(0, 1)), schema)
    finally:
        carried_w.close()
        if part_w is not None:
            part_w.close()
    if carried_chunks == 0:
        os.remove(os.path.join(out_chunks, CARRIED_FILE))  # the pipeline writes no empty carried file

    # documents, a row group at a time: carried as they were; changed ones with their new hashes,
    # a day later
    ch_docs, carried_docs = [], 0
    with _writer(os.path.join(new_version_dir, DOCUMENTS_DIR, CARRIED_FILE), DOCUMENT_SCHEMA) as w:
        for path in doc_files:
            for t in _row_groups(path):
                t = _conform(t, DOCUMENT_SCHEMA)
                m = pc.is_in(t.column("doc_id"), value_set=changed_ids)
                keep = t.filter(pc.invert(m))
                if keep.num_rows:
                    w.write_table(keep)
                    carried_docs += keep.num_rows
                ch_docs.append(t.filter(m))
    if carried_docs == 0:
        os.remove(os.path.join(new_version_dir, DOCUMENTS_DIR, CARRIED_FILE))
    ch_docs = pa.concat_tables(ch_docs) if ch_docs else DOCUMENT_SCHEMA.empty_table()
    hashes = pa.array([new_hash[h] for h in ch_docs.column("content_hash").to_pylist()], pa.string())
    ch_docs = _set(_set(ch_docs, "content_hash", hashes), "source_hash", hashes)
    ch_docs = _set(ch_docs, "mtime", pc.add(ch_docs.column("mtime"), 86400.0))
    _write_file(os.path.join(new_version_dir, DOCUMENTS_DIR, _part(0, 1)), ch_docs)

    # sources: the changed documents' paths get the new hash and mtime
    by_uri = {u: (h, mt) for us, h, mt in zip(ch_docs.column("source_uris").to_pylist(), hashes.to_pylist(),
                                              ch_docs.column("mtime").to_pylist()) for u in (us or [])}
    with _writer(os.path.join(new_version_dir, SOURCES_DIR, "sources.parquet"), SOURCE_SCHEMA) as w:
        for path in shard_files(base_version_dir, SOURCES_DIR):
            for t in _row_groups(path):
                t = _conform(t, SOURCE_SCHEMA)
                uris = t.column("uri").to_pylist()
                t = _set(t, "content_hash", pa.array([by_uri[u][0] if u in by_uri else h for u, h in
                                                      zip(uris, t.column("content_hash").to_pylist())], pa.string()))
                t = _set(t, "mtime", pa.array([by_uri[u][1] if u in by_uri else x for u, x in
                                               zip(uris, t.column("mtime").to_pylist())], pa.float64()))
                w.write_table(t)

    dead = _conform(read_table(base_version_dir, DEAD_LETTERS_DIR), DEAD_LETTER_SCHEMA) \
        if shard_files(base_version_dir, DEAD_LETTERS_DIR) else DEAD_LETTER_SCHEMA.empty_table()
    if dead.num_rows:
        _write_file(os.path.join(new_version_dir, DEAD_LETTERS_DIR, CARRIED_FILE), dead)
    _write_file(os.path.join(new_version_dir, DEAD_LETTERS_DIR, _part(0, 1)), DEAD_LETTER_SCHEMA.empty_table())

    base_name = os.path.basename(os.path.normpath(base_version_dir))
    name = os.path.basename(os.path.normpath(new_version_dir))
    info = {**(_read_json(os.path.join(base_version_dir, "manifest.json")).get("synthetic") or {}),
            "changed_from": base_name, "change_fraction": change_fraction, "change_seed": seed, "sigma": sigma}
    base_counts = _read_json(os.path.join(base_version_dir, "manifest.json")).get("counts") or {}
    counts = {**{"dead_lettered": 0, "duplicates": 0, "near_duplicates": 0}, **base_counts,
              "documents": n_docs, "chunks": carried_chunks + len(added)}
    summary = _summary(base_version_dir, name, counts, {
        "listed": n_docs, "unchanged_not_read": n_docs - n_change, "read": n_change, "unique": n_change,
        "parsed": n_change, "parsed_documents": n_change, "documents": n_docs, "chunks": len(added),
        "embedded": len(added), "changed": n_change, "unchanged": n_docs - n_change,
        "carried_documents": carried_docs, "carried_chunks": carried_chunks,
        "previous_version": base_name}, info)
    summary["chunks"] = len(added)  # as the pipeline counts: chunks made this run
    _write_outputs(new_version_dir, _manifest(base_version_dir, None, name, counts, info), summary)
    return {"version_dir": new_version_dir, "removed_chunk_ids": removed, "added_chunk_ids": added,
            "changed_doc_ids": changed_ids.to_pylist(), "removed": len(removed), "added": len(added),
            "carried_chunks": carried_chunks, "carried_documents": carried_docs,
            "bytes": dir_bytes(new_version_dir), "seconds": round(time.perf_counter() - t0, 2)}


# --- peak RSS of a command ------------------------------------------------------------------

# A small wrapper process spawns the command and reads its rusage with wait4: the command's
# ru_maxrss then starts from the wrapper's ~10 MB, not from this (possibly large) process's RSS,
# which a child forked or vforked straight from here inherits (bench/job.py), and RUSAGE_CHILDREN
# would be the max over every child this process ever waited for.
_WRAPPER = r"""
import json, os, sys, time
out, argv = sys.argv[1], sys.argv[2:]
t = time.perf_counter()
try:
    pid = os.posix_spawnp(argv[0], argv, os.environ)
except OSError as e:
    print(f"peak_rss_mb: {argv[0]}: {e}", file=sys.stderr)
    rc, rss, wall, cpu = 127, 0, 0.0, 0.0
else:
    _, status, ru = os.wait4(pid, 0)
    wall = time.perf_counter() - t
    rc, rss, cpu = os.waitstatus_to_exitcode(status), ru.ru_maxrss, ru.ru_utime + ru.ru_stime
with open(out, "w") as f:
    json.dump({"rc": rc, "maxrss_kb": rss, "wall_s": wall, "cpu_s": cpu}, f)
"""


def peak_rss_mb(cmd: list[str], *, env: Optional[dict] = None, cwd: Optional[str] = None,
                stdout=None, stderr=None, timeout: Optional[float] = None) -> tuple[int, float, float]:
    """Run cmd in a fresh process; (exit code, peak RSS in MB, wall seconds). The peak is
    wait4's ru_maxrss: the largest of the command's process and the descendants it waited for
    (a max over processes, not a sum of concurrent ones). Timing excludes the wrapper's start."""
    r = run_measured(cmd, env=env, cwd=cwd, stdout=stdout, stderr=stderr, timeout=timeout)
    return r["rc"], r["peak_rss_mb"], r["wall_s"]


def run_measured(cmd: list[str], *, env: Optional[dict] = None, cwd: Optional[str] = None,
                 stdout=None, stderr=None, timeout: Optional[float] = None) -> dict:
    """peak_rss_mb's run, as {"rc", "peak_rss_mb", "wall_s", "cpu_s"}: cpu_s is wait4's user +
    system time of the command and the descendants it waited for (every thread, every core)."""
    import tempfile
    fd, out = tempfile.mkstemp(prefix="ragbeam-rss-", suffix=".json")
    os.close(fd)
    try:
        subprocess.run([sys.executable, "-c", _WRAPPER, out, *cmd], env=env, cwd=cwd, stdout=stdout,
                       stderr=stderr, timeout=timeout, check=False)
        with open(out, encoding="utf-8") as f:
            r = json.load(f)
    finally:
        os.remove(out)
    return {"rc": int(r["rc"]), "peak_rss_mb": r["maxrss_kb"] / 1024.0, "wall_s": float(r["wall_s"]),
            "cpu_s": float(r["cpu_s"])}


# --- CLI ------------------------------------------------------------------------------------

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.scale_data", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="the version directory to write")
    ap.add_argument("--chunks", type=int, help="rows of a new synthetic version")
    ap.add_argument("--changed-from", help="a version dir: write its nightly (changed) version instead")
    ap.add_argument("--fraction", type=float, default=0.01, help="documents changed (with --changed-from)")
    ap.add_argument("--seed", type=int, help="default 0 for a version, 1 for a changed one")
    ap.add_argument("--source", choices=sorted(SOURCE_INDEXES), default="sample")
    ap.add_argument("--source-index", help="where the real source index is built/cached")
    ap.add_argument("--config", help="the config the source index is built with (default configs/default.yaml)")
    ap.add_argument("--sigma", type=float, default=SIGMA)
    ap.add_argument("--rows-per-file", type=int, default=50_000)
    ap.add_argument("--overwrite", action="store_true", help="remove --out first")
    a = ap.parse_args(argv)
    if (a.chunks is None) == (a.changed_from is None):
        ap.error("give --chunks N or --changed-from DIR")
    if a.overwrite and os.path.isdir(a.out):
        shutil.rmtree(a.out)
    if a.changed_from:
        r = write_changed_version(a.changed_from, a.out, a.fraction, 1 if a.seed is None else a.seed,
                                  sigma=a.sigma, rows_per_file=a.rows_per_file)
        r = {k: v for k, v in r.items() if not k.endswith("_ids")}
    else:
        src = make_source_rows(a.source, a.source_index, a.config)
        r = write_synthetic_version(src, a.out, a.chunks, 0 if a.seed is None else a.seed, a.rows_per_file,
                                    sigma=a.sigma, log=_log)
    print(json.dumps(r), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
