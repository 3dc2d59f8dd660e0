"""The scale bench's nightly rows: the WHOLE index job (pipelines.index.run_index, what `ragbeam
index` runs) on real source files, a full run against a 1% nightly.

The synthetic documents of bench/scale_corpus.py are written as JSONL record files
(out/scale/src-<n>/<part>/docs-<file>.jsonl: {"id", "title", "text"}, DOCS_PER_FILE records a
file, the text a document's chunk texts joined by blank lines), which the index job lists,
reads, dedupes, parses, chunks, contextualizes, embeds, writes as shards and segments and
publishes. Two runs, each in its own measured process (bench/scale_data.run_measured: wait4's
CPU of every thread, peak RSS):
  full     run_index on the source folder into an empty index folder
  nightly  the documents of ~1% of the files re-sampled (pick_changed_files; every record of a
           picked file edited, its ids kept), then run_index again on the same folder and index
The model's forward pass costs nothing on either side: before each run (untimed, in this
process) the embedding cache of the index (INDEX/cache/embeddings/<namespace>/) is filled for
every chunk that run embeds, by the pipeline's own functions (iter_parse_object, chunk_document,
contextualize, sentence_spans: the stage functions the DoFns call), with the generator's vectors
for that document (its chunks' vectors: pool vectors + noise, unit; sentence vectors int8). Each
run's summary must then say embedded 0 and cache_hits = its chunks (checked: a run that embedded
is refused). What the model would have cost is measured apart (model_cpu_ms_per_chunk: the embed
stage function's forward pass and sentence pooling on real chunks of the corpus) and scales with
the chunks embedded: all of them in a full run, the changed files' in a nightly.
Bytes written: the files a run created or changed under the index folder (path, size, mtime,
inode compared before and after; the pre-filled cache files are in the "before" walk); the
nightly's also per area (nightly_bytes_by_area: shards/<table>, segments, versions/<table>, ...).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from typing import Iterable, Optional

import numpy as np

DOCS_PER_FILE = 200  # JSONL records a source file
FILES_PER_DIR = 500
CHANGE_SEED = 7919  # the re-sampling of a changed document: np.random.default_rng([seed, CHANGE_SEED, d])
PREFILL_PREFIX = "bench-prefill-"  # the cache files written here (the job's own are <version>-NNNNN)
PREFILL_ROWS_PER_FILE = 20_000
# measured at 100k chunks: index 7.0 KB (shards, segments, versions), pre-filled cache 2.7 KB and
# source files 0.5 KB a chunk, the nightly's new files on top
BYTES_PER_CHUNK = 12_000


# --- pure helpers (tests/unit/test_scale_index_job.py) ----------------------------------------

def snapshot(root: str) -> dict[str, tuple[int, int, int]]:
    """Every file under root: relative path -> (size, mtime_ns, inode)."""
    out: dict[str, tuple[int, int, int]] = {}
    if not os.path.isdir(root):
        return out
    for d, _, files in os.walk(root):
        for f in files:
            p = os.path.join(d, f)
            try:
                st = os.stat(p)
            except FileNotFoundError:  # removed while walking
                continue
            out[os.path.relpath(p, root)] = (st.st_size, st.st_mtime_ns, st.st_ino)
    return out


def bytes_written(before: dict, after: dict, exclude: Iterable[str] = ()) -> dict:
    """What a run wrote, from two snapshots: the files that are new (a path not there before) or
    changed (another size, mtime or inode), their sizes summed; `exclude` (relative paths, or
    folder prefixes ending in '/') is left out. Files removed are counted apart (not bytes written)."""
    skip = tuple(exclude)
    new = changed = total = 0
    for rel, st in after.items():
        if skip and (rel in skip or rel.startswith(tuple(s for s in skip if s.endswith("/")))):
            continue
        old = before.get(rel)
        if old == st:
            continue
        if old is None:
            new += 1
        else:
            changed += 1
        total += st[0]
    return {"bytes": total, "new_files": new, "changed_files": changed,
            "removed_files": sum(1 for rel in before if rel not in after)}


def area(rel: str) -> str:
    """Where a file of the index belongs, for the bytes a run wrote: shards/<table> (their key
    summaries apart), segments, versions/<table or file>, cache/embeddings, or its top folder."""
    parts = rel.replace(os.sep, "/").split("/")
    if parts[0] == "shards" and len(parts) > 2:
        return f"shards/{parts[1]}" + (" (summaries)" if rel.endswith(".keys.parquet") else "")
    if parts[0] == "versions" and len(parts) > 2:
        return f"versions/{parts[2]}"
    if parts[0] == "cache":
        return "cache/" + (parts[1] if len(parts) > 2 else "")
    return parts[0]


def bytes_by_area(before: dict, after: dict) -> dict[str, int]:
    """The bytes of the files a run created or changed (as bytes_written), summed per area()."""
    out: dict[str, int] = {}
    for rel, st in after.items():
        if before.get(rel) != st:
            out[area(rel)] = out.get(area(rel), 0) + st[0]
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def pick_changed_files(docs_per_file: list[int], fraction: float, seed: int = 0) -> list[int]:
    """Indexes (sorted) of files, drawn in a seeded random order until their documents reach
    `fraction` of all documents (at least one file, when there are documents)."""
    total = sum(docs_per_file)
    if not total or fraction <= 0:
        return []
    want = fraction * total
    got, picked = 0, []
    for i in np.random.default_rng([seed, 4099]).permutation(len(docs_per_file)).tolist():
        if got >= want and picked:
            break
        if docs_per_file[i]:
            picked.append(i)
            got += docs_per_file[i]
    return sorted(picked)


def file_key(i: int) -> str:
    return f"{i // FILES_PER_DIR:05d}/docs-{i:07d}.jsonl"


def record_id(d: int) -> str:
    return f"doc-{d:09d}"


def jsonl_record(number: int, chunks) -> str:
    """One JSONL line for a synthetic document: its chunks' texts as paragraphs."""
    text = "\n\n".join(t for t in ((c.text or "").strip() for c in chunks) if t)
    title = (chunks[0].title or "").strip() if chunks else ""
    rec = {"id": record_id(number), "text": text or "(empty)"}
    if title:
        rec["title"] = title
    return json.dumps(rec, ensure_ascii=False) + "\n"


def vector_rows(n_real: int, n_synth: int) -> list[int]:
    """Which synthetic chunk's vectors real chunk i of a document takes: in proportion."""
    if n_synth <= 0:
        return [0] * n_real
    return [min(n_synth - 1, i * n_synth // max(1, n_real)) for i in range(n_real)]


# --- the embedding cache, filled by the pipeline's own stage functions ------------------------

class CachePrefill:
    """Chunks of source files -> embedding cache entries under the index's namespace dir."""

    def __init__(self, cfg, index_dir: str, tag: str):
        from pipelines.index import chunk_settings, parse_limits
        from transforms.ingest.contextualize import make_contextualizer
        from transforms.ingest.embed import model_spec_from_config
        from transforms.ingest.embed_cache import namespace_dir
        from transforms.model.tokens import load_tokenizer
        if cfg.contextualize.kind == "llm":
            raise ValueError("the scale bench pre-fills the embedding cache for a deterministic contextualizer")
        self.spec = model_spec_from_config(cfg)
        self.settings = chunk_settings(cfg, self.spec)
        self.limits = parse_limits(cfg)
        self.tokenizer = load_tokenizer(self.spec.tokenizer_path)
        self.contextualizer = make_contextualizer(cfg.contextualize.kind)
        self.cache_dir = namespace_dir(index_dir, self.spec.namespace)
        self.tag = tag
        self.entries: list[tuple] = []
        self.files: list[str] = []
        self.chunks = 0
        self.documents = 0
        self.sample: list[dict] = []  # the first chunks, for the model's CPU

    def add_file(self, key: str, uri: str, data: bytes, synth: dict) -> int:
        """The chunks the index job makes of one file (synth: record id -> SynthDoc)."""
        from transforms.ingest.contextualize import contextualize
        from transforms.ingest.chunk import chunk_document
        from transforms.ingest.embed_cache import cache_key
        from transforms.ingest.parse import iter_parse_object
        from transforms.ingest.sentvec import quantize_int8, sentence_spans
        from transforms.records import RawObject
        raw = RawObject(uri=uri, key=key, data=data, size=len(data), mtime=0.0,
                        content_hash=hashlib.sha256(data).hexdigest())
        n = 0
        for doc in iter_parse_object(raw, None, None, self.limits):
            if isinstance(doc, str):
                raise ValueError(f"{key}: {doc}")
            chunks = contextualize(chunk_document(doc, self.tokenizer, self.settings), self.contextualizer,
                                   self.tokenizer, self.settings.context_tokens)
            sd = synth[doc.metadata["record_id"]]
            for c, j in zip(chunks, vector_rows(len(chunks), len(sd.chunks))):
                s = sd.chunks[j]
                spans = sentence_spans(c.text)
                sv = s.sentence_vectors
                if sv is not None and len(sv):
                    q = sv[np.arange(len(spans)) % len(sv)]
                else:
                    q = (quantize_int8(np.tile(s.embedding, (len(spans), 1))) if spans
                         else np.zeros((0, self.spec.dim), np.int8))
                self.entries.append((cache_key(c.embed_text), np.asarray(s.embedding, np.float32), spans,
                                     np.asarray(q, np.int8).reshape(len(spans), self.spec.dim)))
                if len(self.sample) < 256:
                    self.sample.append({"embed_text": c.embed_text, "text": c.text})
            n += len(chunks)
            self.documents += 1
        self.chunks += n
        if len(self.entries) >= PREFILL_ROWS_PER_FILE:
            self.flush()
        return n

    def flush(self) -> None:
        import pyarrow as pa

        from bench.scale_data import _fixed_array, _sentence_array
        from transforms.ingest.embed_cache import ARROW_SUFFIX, cache_schema, write_arrow_file
        if not self.entries:
            return
        dim = self.spec.dim
        keys, embs, spans, svs = zip(*self.entries)
        counts = np.array([len(s) for s in spans], np.int64)
        offsets = pa.array(np.concatenate([[0], np.cumsum(counts)]).astype(np.int32))
        starts = pa.ListArray.from_arrays(offsets, pa.array([a for s in spans for a, _ in s], pa.int32()))
        ends = pa.ListArray.from_arrays(offsets, pa.array([b for s in spans for _, b in s], pa.int32()))
        flat = np.concatenate(svs) if svs else np.zeros((0, dim), np.int8)
        table = pa.table({"key": pa.array(keys, pa.string()), "embedding": _fixed_array(np.stack(embs), dim),
                          "sentence_starts": starts, "sentence_ends": ends,
                          "sentence_vectors": _sentence_array(flat, counts, np.ones(len(keys), bool), dim)})
        os.makedirs(self.cache_dir, exist_ok=True)
        # the form the job's own commits write (a Parquet file would be rewritten by the next run)
        path = os.path.join(self.cache_dir, f"{PREFILL_PREFIX}{self.tag}-{len(self.files):05d}{ARROW_SUFFIX}")
        write_arrow_file([table.cast(cache_schema(dim))], path, dim)
        self.files.append(path)
        self.entries = []


# --- the source files ------------------------------------------------------------------------

@dataclass
class Sources:
    """What was written: per file its documents as (number, pool rows)."""
    folder: str
    files: list = field(default_factory=list)  # [[(d, [pool rows]), ...], ...]
    synth_chunks: int = 0

    def docs_per_file(self) -> list[int]:
        return [len(f) for f in self.files]


def _write_file(folder: str, i: int, docs: list, prefill: Optional[CachePrefill]) -> int:
    key = file_key(i)
    path = os.path.join(folder, key)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    data = "".join(jsonl_record(doc.number, doc.chunks) for doc in docs).encode("utf-8")
    with open(path, "wb") as f:
        f.write(data)
    if prefill is None:
        return 0
    return prefill.add_file(key, path, data, {record_id(doc.number): doc for doc in docs})


def write_sources(gen, folder: str, n_chunks: int, prefill: Optional[CachePrefill] = None,
                  docs_per_file: int = DOCS_PER_FILE, log=None) -> Sources:
    """The generator's documents for n_chunks synthetic chunks, as JSONL files under folder."""
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    out = Sources(folder)
    batch: list = []
    t0 = time.perf_counter()
    for doc in gen.documents(n_chunks):
        batch.append(doc)
        out.synth_chunks += len(doc.chunks)
        if len(batch) == docs_per_file:
            _write_file(folder, len(out.files), batch, prefill)
            out.files.append([(d.number, [c.row for c in d.chunks]) for d in batch])
            batch = []
            if log and len(out.files) % 100 == 0:
                log(f"scale_index_job: {len(out.files)} files, {out.synth_chunks} synthetic chunks "
                    f"({time.perf_counter() - t0:.0f} s)")
    if batch:
        _write_file(folder, len(out.files), batch, prefill)
        out.files.append([(d.number, [c.row for c in d.chunks]) for d in batch])
    if prefill is not None:
        prefill.flush()
    return out


def change_sources(gen, src: Sources, picked: list[int], prefill: Optional[CachePrefill] = None) -> int:
    """Every document of the picked files re-sampled from its own pool rows (ids kept); the
    files rewritten in place. Returns the documents changed."""
    changed = 0
    for i in picked:
        docs = [gen.resample(np.random.default_rng([gen.seed, CHANGE_SEED, d]), rows, d) for d, rows in src.files[i]]
        _write_file(src.folder, i, docs, prefill)
        changed += len(docs)
    if prefill is not None:
        prefill.flush()
    return changed


# --- the measured runs ---------------------------------------------------------------------------

def child_index(a) -> dict:
    """One index job run (a child process of the bench): its summary."""
    from bench.scale_bench import _cfg
    from pipelines.index import run_index
    summary = run_index(_cfg(a.segment), a.input, a.index, progress=False,
                        log=lambda *x: print(*x, file=sys.stderr, flush=True))
    return json.loads(json.dumps(summary, default=str))


def child_model(a) -> dict:
    """The model's CPU per chunk: the embed stage's forward pass + sentence pooling (what a cache
    miss costs, transforms/ingest/embed.py embed_chunks) on chunks of the corpus, after a warm-up."""
    from bench.scale_bench import _cfg
    from transforms.ingest.embed import Embedder, model_spec_from_config
    from transforms.ingest.sentvec import chunk_sentence_vectors, quantize_int8
    cfg = _cfg(a.segment)
    with open(a.input, encoding="utf-8") as f:
        sample = json.load(f)
    embedder = Embedder(model_spec_from_config(cfg))
    warm, timed = sample[:16], sample[16:16 + 200]
    chunk_sentence_vectors(embedder, [c["embed_text"] for c in warm], [c["text"] for c in warm],
                           batch_size=cfg.embed.batch_size, kind="late")
    t0, w0 = time.process_time(), time.perf_counter()
    _, _, svecs = chunk_sentence_vectors(embedder, [c["embed_text"] for c in timed], [c["text"] for c in timed],
                                         batch_size=cfg.embed.batch_size, kind="late")
    [quantize_int8(s) for s in svecs]
    cpu, wall = time.process_time() - t0, time.perf_counter() - w0
    return {"chunks": len(timed), "cpu_ms_per_chunk": round(1000 * cpu / max(1, len(timed)), 2),
            "wall_ms_per_chunk": round(1000 * wall / max(1, len(timed)), 2)}


SUMMARY_COUNTS = ("listed", "unchanged_not_read", "read", "documents", "near_duplicates", "chunks", "embedded",
                  "cache_hits", "bytes_read")


def _counts(s: dict) -> dict:
    art = s.get("artifact") or {}
    return {**{k: s.get(k) for k in SUMMARY_COUNTS},
            **{k: s.get(k) for k in ("added", "changed", "removed", "carried") if k in s},
            **{f"segments_{k}": art.get(k) for k in ("reused", "built", "merged", "tombstones") if k in art},
            "segments": art.get("segments"), "artifact_s": art.get("artifact_s"), "wall_s": s.get("wall_s")}


def _check_cached(what: str, s: dict, tolerance: float = 0.001) -> None:
    """A run's model work must be nil: every chunk from the pre-filled cache."""
    chunks, embedded = int(s.get("chunks") or 0), int(s.get("embedded") or 0)
    if chunks == 0 or embedded > tolerance * chunks or int(s.get("cache_hits") or 0) != chunks - embedded:
        raise RuntimeError(f"{what}: {embedded} of {chunks} chunks embedded, {s.get('cache_hits')} from the "
                           "cache: the pre-filled embedding cache does not match the job's chunks")


def measure(n: int, pool, segment: int, run_child, work: str, fraction: float = 0.01, seed: int = 0,
            questions: Optional[int] = None, log=None) -> dict:
    """A full index job run on n synthetic chunks' source files and a nightly with `fraction`
    of the documents changed; the nightly row's figures. run_child(args, result) -> (result,
    peak RSS MB, CPU s) runs a bench step in its own measured process."""
    from bench.scale_bench import _cfg
    from bench.scale_corpus import Generator
    log = log or (lambda *_: None)
    cfg = _cfg(segment)
    src_dir, idx = os.path.join(work, f"src-{n}"), os.path.join(work, f"job-{n}")
    shutil.rmtree(idx, ignore_errors=True)
    gen = Generator(pool, seed, questions=questions, log=log)
    t0 = time.perf_counter()
    pre = CachePrefill(cfg, idx, "full")
    src = write_sources(gen, src_dir, n, pre, log=log)
    log(f"scale_index_job: {len(src.files)} files, {pre.documents} documents, {pre.chunks} chunks "
        f"({src.synth_chunks} synthetic), cache pre-filled ({time.perf_counter() - t0:.0f} s)")
    res = os.path.join(work, "result.json")
    sample = os.path.join(work, f"model-sample-{n}.json")
    with open(sample, "w", encoding="utf-8") as f:
        json.dump(pre.sample, f)

    before = snapshot(idx)
    full, full_rss, full_cpu = run_child(["index", "--input", src_dir, "--index", idx, "--segment", str(segment)], res)
    full_w = bytes_written(before, snapshot(idx))
    _check_cached("full run", full)

    picked = pick_changed_files(src.docs_per_file(), fraction, seed)
    pre2 = CachePrefill(cfg, idx, "nightly")
    changed_docs = change_sources(gen, src, picked, pre2)
    before = snapshot(idx)
    night, night_rss, night_cpu = run_child(["index", "--input", src_dir, "--index", idx,
                                             "--segment", str(segment)], res)
    after = snapshot(idx)
    night_w = bytes_written(before, after)
    night_areas = bytes_by_area(before, after)
    _check_cached("nightly run", night)

    model, _, _ = run_child(["model", "--input", sample, "--segment", str(segment)], res)
    docs = sum(src.docs_per_file())
    fc, nc = _counts(full), _counts(night)
    return {
        "chunks": n, "chunks_indexed": full["chunks"], "documents": docs, "source_files": len(src.files),
        "segment_max_chunks": segment, "nightly": True, "measure": "index job",
        "change_fraction": round(changed_docs / max(1, docs), 4), "changed_files": len(picked),
        "changed_documents": changed_docs,
        "nightly_cpu_s": round(night_cpu, 2), "full_cpu_s": round(full_cpu, 2),
        "nightly_cpu_vs_full": round(night_cpu / full_cpu, 4),
        "nightly_bytes_written": night_w["bytes"], "full_bytes_written": full_w["bytes"],
        "nightly_bytes_vs_full": round(night_w["bytes"] / max(1, full_w["bytes"]), 4),
        "nightly_files_written": night_w["new_files"] + night_w["changed_files"],
        "nightly_bytes_by_area": night_areas,  # what the nightly wrote, where (area())
        "full_files_written": full_w["new_files"] + full_w["changed_files"],
        "nightly_peak_rss_mb": round(night_rss), "full_peak_rss_mb": round(full_rss),
        "nightly_wall_s": night.get("wall_s"), "full_wall_s": full.get("wall_s"),
        "nightly_artifact_s": nc["artifact_s"], "full_artifact_s": fc["artifact_s"],
        "nightly_vs_full": (round(nc["artifact_s"] / fc["artifact_s"], 4)
                            if nc["artifact_s"] and fc["artifact_s"] else None),
        "segments": nc["segments"],
        "nightly_objects_read": nc["read"], "nightly_chunks": nc["chunks"], "nightly_embedded": nc["embedded"],
        "nightly_cache_hits": nc["cache_hits"], "full_objects_read": fc["read"], "full_embedded": fc["embedded"],
        "full_cache_hits": fc["cache_hits"],
        **{k: nc[k] for k in ("segments_reused", "segments_built", "segments_merged", "segments_tombstones")
           if k in nc},
        "full_segments_built": fc.get("segments_built"),
        "near_duplicates": fc["near_duplicates"],
        "model_cpu_ms_per_chunk": model["cpu_ms_per_chunk"], "model_chunks_timed": model["chunks"],
        # the model's forward pass, added back: every chunk in a full run, the changed ones' in a nightly
        "full_cpu_with_model_s": round(full_cpu + full["chunks"] * model["cpu_ms_per_chunk"] / 1000, 1),
        "nightly_cpu_with_model_s": round(night_cpu + night["chunks"] * model["cpu_ms_per_chunk"] / 1000, 1),
        "full_summary": fc, "nightly_summary": nc,
    }
