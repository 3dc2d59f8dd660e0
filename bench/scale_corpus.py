"""Realistic synthetic index versions for the scale bench, re-sampled from a real pool.

    python -m bench.scale_corpus --chunks 20000 --out out/scale/r20k [--seed 0] [--gold PATH]
    python -m bench.scale_corpus --measure-noise 200     # real embeddings of synthetic text vs SIGMA

A synthetic document re-samples one non-gold document of the pool (bench/scale_pool.py), all
equally likely: its chunks in order, each sentence kept or (SWAP) replaced by one drawn from the
whole pool, its tail words replaced as bench/scale_vocab.py says (vocabulary growing by Heaps' law).
Each vector is its real pool vector plus Gaussian noise (SIGMA, see --measure-noise), re-normalised;
the other columns are the pool chunk's. The gold documents of the pool's questions are planted
verbatim, spread evenly; the gold map gives each question its synthetic doc and chunk ids.
Deterministic (document d depends on seed, d, n_chunks and the pool only) and streaming (a row
group at a time: memory does not grow with n_chunks). The output is a version directory, as
bench/scale_data.py writes. How it is made and measured: docs/benchmarks.md, "The scale corpus".
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Optional

import numpy as np
import pyarrow as pa

from bench.scale_data import (ROW_GROUP_ROWS, SYNTHETIC_MTIME, _check_empty, _fixed_array, _manifest, _part,
                              _sentence_array, _set, _sha, _Source, _summary, _unit, _write_file,
                              _write_outputs, _writer, dir_bytes)
from bench.scale_pool import Pool, build_pool, pool_digest
from bench.scale_vocab import VocabularyModel
from transforms.common.words import BM25_STOPWORDS
from transforms.index.bm25 import bm25_tokens
from transforms.index.incremental import SOURCES_DIR
from transforms.index.shards import CHUNKS_DIR, DEAD_LETTERS_DIR, DOCUMENTS_DIR
from transforms.ingest.sentvec import quantize_int8
from transforms.records import DEAD_LETTER_SCHEMA, DOCUMENT_SCHEMA, SOURCE_SCHEMA

GENERATOR = "resampled-v1"  # bump when the rows a seed gives change
SWAP = 0.2  # a sentence's chance to be replaced by one drawn from the whole pool
SIGMA = 0.044  # noise per component: two re-samplings of a chunk at the cosine the model gives them (--measure-noise)
ID_LEN = 32
_COMPOUND = re.compile(r"[^\W_]+(?:[._\-][^\W_]+)*")  # as transforms/index/bm25.py splits compounds


def _log(*a) -> None:
    print(*a, file=sys.stderr, flush=True)


# --- templates: the pool's texts with their tail words as slots -------------------------------

@dataclass
class Part:
    """A string whose tail words are slots: lits[0] w0 lits[1] w1 ... lits[-1]."""
    lits: tuple
    slots: tuple  # tail term ids
    cases: tuple  # 0 lower, 1 Capitalised, 2 UPPER
    tokens: int  # BM25 tokens in the string

    def render(self, words: dict) -> str:
        if not self.slots:
            return self.lits[0]
        out = [self.lits[0]]
        for sid, case, lit in zip(self.slots, self.cases, self.lits[1:]):
            w = words[sid]
            out.append(w if case == 0 else w.capitalize() if case == 1 else w.upper())
            out.append(lit)
        return "".join(out)


@dataclass
class _Chunk:
    ctx: Part
    title: Part
    heads: list
    gaps: list  # len(sents) + 1 parts around the sentences
    sents: list = field(default_factory=list)  # sentence ids (Templates.sentences)


class Templates:
    """Every pool chunk as parts, the pool's sentences, the pool's documents (rows in order)."""

    def __init__(self, pool: Pool, src: _Source, vocab: VocabularyModel):
        from bench.scale_pool import analyzer
        rows = pool.rows
        texts = rows.column("text").to_pylist()
        ctxs = rows.column("context").to_pylist()
        titles = rows.column("title").to_pylist()
        heads = rows.column("heading_path").to_pylist()
        starts = rows.column("sentence_starts").to_pylist()
        ends = rows.column("sentence_ends").to_pylist()
        words = {m.group().lower() for s in texts + ctxs + titles + [h for hs in heads for h in hs or []] if s
                 for m in _COMPOUND.finditer(s) if m.group().isascii() and m.group().isalpha()}
        words = sorted(w for w in words if w not in BM25_STOPWORDS)
        stems = analyzer().analyze(words)
        tail = sorted({st[0] for st in stems if st and st[0] not in vocab.head})
        self.tail_terms = tail
        tid = {t: i for i, t in enumerate(tail)}
        self.slot_of = {w: tid[st[0]] for w, st in zip(words, stems) if st and st[0] in tid}
        gold = {r for q in pool.questions for r in q["gold"]}
        is_gold = np.array([bool(gold & set(refs)) for refs in pool.refs], bool)  # never re-sampled
        self.chunks: list[_Chunk] = []
        self.sentences: list[Part] = []
        self.sentence_vec: list[int] = []  # row of the sentence's vector in src.sv_flat
        swappable: list[int] = []
        for i in range(rows.num_rows):
            text = texts[i] or ""
            c = _Chunk(self.part(ctxs[i] or ""), self.part(titles[i] or ""), [self.part(h) for h in heads[i] or []], [])
            if starts[i] and ends[i] and src.sv_valid[i] and len(starts[i]) == src.sv_count[i]:
                pos = 0
                for k, (a, b) in enumerate(zip(starts[i], ends[i])):
                    c.gaps.append(self.part(text[pos:a]))
                    c.sents.append(len(self.sentences))
                    if not is_gold[i]:
                        swappable.append(len(self.sentences))
                    self.sentences.append(self.part(text[a:b]))
                    self.sentence_vec.append(int(src.sv_off[i]) + k)
                    pos = b
                c.gaps.append(self.part(text[pos:]))
            else:
                c.gaps.append(self.part(text))
            self.chunks.append(c)
        self.swappable = np.asarray(swappable, np.int64)
        # documents: rows by doc_id in ordinal order
        by_doc: dict[str, list[int]] = {}
        for i, (d, o) in enumerate(zip(rows.column("doc_id").to_pylist(), rows.column("ordinal").to_pylist())):
            by_doc.setdefault(d, []).append((o, i))
        self.docs = [[i for _, i in sorted(v)] for _, v in sorted(by_doc.items())]
        self.parents = [k for k, d in enumerate(self.docs) if not is_gold[d].any()]

    def part(self, s: str) -> Part:
        lits, slots, cases, pos = [], [], [], 0
        for m in _COMPOUND.finditer(s):
            w = m.group()
            sid = self.slot_of.get(w.lower()) if len(w) > 2 and w.isascii() and w.isalpha() else None
            if sid is None:
                continue
            lits.append(s[pos:m.start()])
            slots.append(sid)
            cases.append(2 if len(w) > 1 and w.isupper() else 1 if w[0].isupper() else 0)
            pos = m.end()
        lits.append(s[pos:])
        return Part(tuple(lits), tuple(slots), tuple(cases), len(bm25_tokens(s)))


# --- the generator ----------------------------------------------------------------------------

@dataclass
class SynthChunk:
    row: int  # the pool row it re-samples (its other columns)
    text: str
    context: str
    title: str
    heading_path: list
    starts: Optional[list]
    ends: Optional[list]
    embedding: np.ndarray  # (dim,) float32 unit
    sentence_vectors: Optional[np.ndarray]  # (k, dim) int8


@dataclass
class SynthDoc:
    number: int
    chunks: list
    gold_ref: Optional[str] = None  # the pool document planted verbatim, if this is one


class Generator:
    """Synthetic documents of one version: `documents(n_chunks)` yields them in order."""

    def __init__(self, pool: Pool, seed: int = 0, sigma: float = SIGMA, swap: float = SWAP,
                 questions: Optional[int] = None, log=_log):
        """questions: how many of the pool's questions (in order) get their gold documents planted
        (default all); gold documents are never re-sampled, whatever this is."""
        t0 = time.perf_counter()
        self.pool, self.seed, self.sigma, self.swap = pool, int(seed), float(sigma), float(swap)
        self.questions = pool.questions[:questions] if questions is not None else pool.questions
        self.src = _Source(pool.rows)
        lex = pool.lexicon
        self.vocab = VocabularyModel(lex.column("term").to_pylist(), lex.column("count").to_pylist(),
                                     lex.column("surface").to_pylist())
        self.t = Templates(pool, self.src, self.vocab)
        self.v_fixed, self.draws_per_token, self.tokens_per_chunk = self._model_inputs()
        st = pool.stats
        self.fit_rms = self.vocab.calibrate(st["K"], st["beta"], self.v_fixed, self.draws_per_token,
                                            20_000 * self.tokens_per_chunk, 3_000_000 * self.tokens_per_chunk)
        # the gold documents, in the order the questions name them
        gold_refs = list(dict.fromkeys(r for q in self.questions for r in q["gold"]))
        doc_of_ref = {}
        for k, d in enumerate(self.t.docs):
            for r in pool.refs[d[0]]:
                doc_of_ref.setdefault(r, k)
        self.gold = [(r, doc_of_ref[r]) for r in gold_refs if r in doc_of_ref]
        log(f"scale_corpus: pool {pool.name}: {pool.rows.num_rows} chunks, {len(self.t.parents)} parent documents, "
            f"{len(self.t.swappable)} sentences, head {self.vocab.R} terms, Zipf s={self.vocab.s:.3f} "
            f"(log RMS {self.fit_rms:.3f}), {len(self.gold)} gold documents ({time.perf_counter() - t0:.1f} s)")

    def _model_inputs(self, sample_docs: int = 2000) -> tuple[int, float, float]:
        """(terms outside the tail slots, tail draws per token, tokens per chunk), the last two
        from sample_docs documents drawn as documents() draws them."""
        from bench.scale_pool import analyzer
        rows = [r for k in self.t.parents for r in self.t.docs[k]]
        texts = self.pool.rows.column("text").take(pa.array(rows, pa.int64())).to_pylist()
        ctxs = self.pool.rows.column("context").take(pa.array(rows, pa.int64())).to_pylist()
        texts = [(c or "") + "\n" + (x or "") for c, x in zip(ctxs, texts)]  # what BM25 analyses
        terms = {t for ts in analyzer().analyze(texts) for t in ts}
        v_fixed = len(terms - set(self.t.tail_terms))
        draws = tokens = chunks = 0
        for d in range(sample_docs):
            rng = np.random.default_rng([self.seed, 7, d])
            rows_d, sents = self._structure(rng, self._parent(rng))
            slots, ntok = self._slots(rows_d, sents)
            draws, tokens, chunks = draws + len(slots), tokens + ntok, chunks + len(rows_d)
        return v_fixed, draws / max(1, tokens), tokens / max(1, chunks)

    def _parent(self, rng) -> list[int]:
        return self.t.docs[self.t.parents[int(rng.integers(0, len(self.t.parents)))]]

    def _structure(self, rng, rows: list[int]) -> tuple[list[int], list[list[int]]]:
        """Per chunk, its sentence ids: kept, or (swap) drawn from the pool's sentences."""
        sents = []
        for r in rows:
            own = self.t.chunks[r].sents
            if own and len(self.t.swappable):
                swap = rng.random(len(own)) < self.swap
                pick = self.t.swappable[rng.integers(0, len(self.t.swappable), len(own))]
                own = [int(p) if s else o for o, s, p in zip(own, swap, pick)]
            sents.append(own)
        return rows, sents

    def _slots(self, rows: list[int], sents: list[list[int]]) -> tuple[np.ndarray, int]:
        """The tail terms the document holds (sorted), and its BM25 tokens (context + text)."""
        parts = []
        for r, ss in zip(rows, sents):
            c = self.t.chunks[r]
            parts += [c.ctx, c.title, *c.heads, *c.gaps, *(self.t.sentences[s] for s in ss)]
        slots = np.unique(np.fromiter((s for p in parts for s in p.slots), np.int64))
        ntok = sum(p.tokens for r, ss in zip(rows, sents)
                   for p in (self.t.chunks[r].ctx, *self.t.chunks[r].gaps, *(self.t.sentences[s] for s in ss)))
        return slots, ntok

    def documents(self, n_chunks: int) -> Iterator[SynthDoc]:
        G = len(self.gold)
        plant_at = [int((g + 0.5) * n_chunks / G) for g in range(G)] if G else []
        made, d, g = 0, 0, 0
        while made < n_chunks:
            if g < G and plant_at[g] <= made:
                doc = self._planted(d, g, n_chunks - made)
                g += 1
            else:
                doc = self._resampled(d, n_chunks - made)
            made += len(doc.chunks)
            d += 1
            yield doc

    def _planted(self, d: int, g: int, room: int) -> SynthDoc:
        ref, k = self.gold[g]
        src, tb = self.src, self.pool.rows
        out = []
        for r in self.t.docs[k][:room]:
            row = tb.slice(r, 1).to_pylist()[0]
            sv = src.sv_flat[src.sv_off[r]:src.sv_off[r + 1]] if src.sv_valid[r] else None
            out.append(SynthChunk(r, row["text"] or "", row["context"], row["title"], row["heading_path"],
                                  row["sentence_starts"], row["sentence_ends"], src.emb[r],
                                  None if sv is None else quantize_int8(sv)))
        return SynthDoc(d, out, ref)

    def _resampled(self, d: int, room: int) -> SynthDoc:
        rng = np.random.default_rng([self.seed, d])
        return self.resample(rng, self._parent(rng)[:room], d)

    def resample(self, rng, parent_rows: list[int], d: int) -> SynthDoc:
        """Document number d re-sampled from the pool rows given (a document's, in order)."""
        rows, sents = self._structure(rng, parent_rows)
        slots, _ = self._slots(rows, sents)
        words = {int(s): self.vocab.surface(x) for s, x in zip(slots, self.vocab.draw(rng, len(slots)))}
        src, dim = self.src, self.src.dim
        emb = _unit(src.emb[rows] + self.sigma * rng.standard_normal((len(rows), dim), dtype=np.float32))
        n_sv = sum(map(len, sents))
        noise = rng.standard_normal((n_sv, dim), dtype=np.float32)
        out, at = [], 0
        for j, (r, ss) in enumerate(zip(rows, sents)):
            c = self.t.chunks[r]
            pieces, starts, ends = [c.gaps[0].render(words)], [], []
            pos = len(pieces[0])
            for s, gap in zip(ss, c.gaps[1:]):
                st = self.t.sentences[s].render(words)
                starts.append(pos)
                ends.append(pos + len(st))
                gp = gap.render(words)
                pieces += [st, gp]
                pos += len(st) + len(gp)
            sv = None
            if ss:
                vec = src.sv_flat[[self.t.sentence_vec[s] for s in ss]]
                sv = quantize_int8(_unit(vec + self.sigma * noise[at:at + len(ss)]))
                at += len(ss)
            out.append(SynthChunk(r, "".join(pieces), c.ctx.render(words), c.title.render(words),
                                  [h.render(words) for h in c.heads], starts or None, ends or None, emb[j], sv))
        return SynthDoc(d, out)


# --- writing a version -------------------------------------------------------------------------

def _doc_id(seed: int, d: int) -> str:
    return _sha(f"{seed}:resampled-doc:{d}")[:ID_LEN]


def _doc_key(seed: int, d: int) -> str:
    return f"scale-{seed}/{d // 1000:06d}/doc-{d:09d}.txt"


def _chunk_table(gen: Generator, batch: list[tuple[SynthDoc, int, int]], first: int) -> pa.Table:
    """Rows `first`.. of the version: (document, ordinal, its chunk) per row."""
    src, seed = gen.src, gen.seed
    idx = pa.array([doc.chunks[o].row for doc, o in batch], pa.int64())
    t = src.table.take(idx)
    chunks = [doc.chunks[o] for doc, o in batch]
    uris = pa.array(["/synthetic/" + _doc_key(seed, doc.number) for doc, _ in batch], pa.string())
    t = _set(t, "chunk_id", pa.array([_sha(f"{seed}:resampled:{i}")[:ID_LEN] for i in range(first, first + len(batch))],
                                     pa.string()))
    t = _set(t, "doc_id", pa.array([_doc_id(seed, doc.number) for doc, _ in batch], pa.string()))
    t = _set(t, "content_hash", pa.array([_sha(f"{seed}:resampled-content:{doc.number}") for doc, _ in batch],
                                         pa.string()))
    t = _set(t, "ordinal", pa.array([o for _, o in batch], pa.int32()))
    t = _set(t, "source_uri", uris)
    t = _set(t, "source_uris", pa.ListArray.from_arrays(pa.array(np.arange(len(batch) + 1, dtype=np.int32)), uris))
    for name in ("text", "context", "title"):
        t = _set(t, name, pa.array([getattr(c, name) for c in chunks], pa.string()))
    t = _set(t, "heading_path", pa.array([c.heading_path for c in chunks], pa.list_(pa.string())))
    t = _set(t, "sentence_starts", pa.array([c.starts for c in chunks], pa.list_(pa.int32())))
    t = _set(t, "sentence_ends", pa.array([c.ends for c in chunks], pa.list_(pa.int32())))
    t = _set(t, "embedding", _fixed_array(np.stack([c.embedding for c in chunks]).astype(np.float32), src.dim))
    counts = np.array([0 if c.sentence_vectors is None else len(c.sentence_vectors) for c in chunks], np.int64)
    valid = np.array([c.sentence_vectors is not None for c in chunks], bool)
    flat = [c.sentence_vectors for c in chunks if c.sentence_vectors is not None and len(c.sentence_vectors)]
    q = np.concatenate(flat) if flat else np.zeros((0, src.dim), np.int8)
    t = _set(t, "sentence_vectors", _sentence_array(q, counts, valid, src.dim))
    return t.cast(src.schema)


def _doc_summary(doc: SynthDoc) -> tuple:
    """What a document's documents/ and sources/ rows need (not its chunks: memory)."""
    return (doc.number, doc.chunks[0].row, doc.chunks[0].title, len(doc.chunks),
            sum(len(c.text.encode("utf-8")) for c in doc.chunks))


def _doc_rows(gen: Generator, docs: list[tuple]) -> tuple[pa.Table, pa.Table]:
    seed, src = gen.seed, gen.src
    drows, srows = [], []
    for number, r, title, n_chunks, size in docs:
        key = _doc_key(seed, number)
        uri, h = "/synthetic/" + key, _sha(f"{seed}:resampled-content:{number}")
        drows.append({"doc_id": _doc_id(seed, number), "content_hash": h, "source_hash": h, "source_uri": uri,
                      "source_uris": [uri], "key": key, "format": src.formats[r], "title": title,
                      "status": "indexed", "chunk_count": n_chunks, "size": size,
                      "mtime": SYNTHETIC_MTIME, "acl": src.acls[r] or [], "metadata": src.metadata[r] or "{}"})
        srows.append({"uri": uri, "key": key, "size": size, "mtime": SYNTHETIC_MTIME, "content_hash": h,
                      "status": "live", "tombstoned_at": None})
    return pa.Table.from_pylist(drows, DOCUMENT_SCHEMA), pa.Table.from_pylist(srows, SOURCE_SCHEMA)


def write_realistic_version(pool: Pool, version_dir: str, n_chunks: int, seed: int = 0,
                            rows_per_file: int = 50_000, *, sigma: float = SIGMA, questions: Optional[int] = None,
                            log=None, generator: Optional[Generator] = None) -> dict:
    """Write a version of n_chunks re-sampled rows at version_dir (chunks/ in
    ceil(n_chunks / rows_per_file) files, documents/ one file per chunks file holding the documents
    that start in it, sources/, an empty dead_letters/ shard, summary.json, manifest.json last).
    Returns its stats, "gold" included: question id -> {"doc_ids", "chunk_ids"} of its planted
    gold documents (questions whose gold documents did not all fit are left out)."""
    if n_chunks < 1 or rows_per_file < 1:
        raise ValueError("n_chunks and rows_per_file must be >= 1")
    t0 = time.perf_counter()
    _check_empty(version_dir)
    gen = generator or Generator(pool, seed, sigma, questions=questions, log=log or (lambda *_: None))
    n_files = math.ceil(n_chunks / rows_per_file)
    os.makedirs(version_dir, exist_ok=True)
    planted: dict[str, tuple[str, list[str]]] = {}  # gold ref -> (doc id, chunk ids)
    n_docs, row, f = 0, 0, 0
    batch: list = []
    file_docs: list[tuple] = []  # _doc_summary of the documents starting in the current file
    chunk_w = _writer(os.path.join(version_dir, CHUNKS_DIR, _part(0, n_files)), gen.src.schema)
    sources_w = _writer(os.path.join(version_dir, SOURCES_DIR, "sources.parquet"), SOURCE_SCHEMA)

    def flush_batch():
        nonlocal batch, row
        if batch:
            t = _chunk_table(gen, batch, row)
            chunk_w.write_table(t, row_group_size=ROW_GROUP_ROWS)
            for (doc, _), cid in zip(batch, t.column("chunk_id").to_pylist()):
                if doc.gold_ref is not None:
                    planted.setdefault(doc.gold_ref, (_doc_id(gen.seed, doc.number), []))[1].append(cid)
            row += len(batch)
            batch = []

    def flush_file():
        nonlocal chunk_w, file_docs, f
        flush_batch()
        chunk_w.close()
        docs, sources = _doc_rows(gen, file_docs)
        _write_file(os.path.join(version_dir, DOCUMENTS_DIR, _part(f, n_files)), docs)
        sources_w.write_table(sources, row_group_size=50_000)
        file_docs, f = [], f + 1
        if log:
            log(f"scale_corpus: {row}/{n_chunks} rows ({time.perf_counter() - t0:.1f} s)")
        if f < n_files:
            chunk_w = _writer(os.path.join(version_dir, CHUNKS_DIR, _part(f, n_files)), gen.src.schema)

    try:
        for doc in gen.documents(n_chunks):
            n_docs += 1
            file_docs.append(_doc_summary(doc))  # a document's rows go to the file its first chunk is in
            for o in range(len(doc.chunks)):
                batch.append((doc, o))
                if row + len(batch) == (f + 1) * rows_per_file:
                    flush_file()
                elif len(batch) == ROW_GROUP_ROWS:
                    flush_batch()
        if f < n_files:
            flush_file()
    finally:
        chunk_w.close()
        sources_w.close()
    _write_file(os.path.join(version_dir, DEAD_LETTERS_DIR, _part(0, 1)), DEAD_LETTER_SCHEMA.empty_table())
    gold = {}
    for q in gen.questions:
        if all(r in planted for r in q["gold"]):
            gold[q["id"]] = {"doc_ids": sorted({planted[r][0] for r in q["gold"]}),
                             "chunk_ids": sorted(c for r in q["gold"] for c in planted[r][1])}
    name = os.path.basename(os.path.normpath(version_dir))
    info = {"generator": GENERATOR, "pool": pool.name, "pool_digest": pool_digest(pool), "seed": gen.seed,
            "sigma": gen.sigma, "swap": gen.swap, "zipf_s": round(gen.vocab.s, 4), "head_terms": gen.vocab.R,
            "heaps_K": pool.stats["K"], "heaps_beta": pool.stats["beta"], "rows_per_file": rows_per_file,
            "questions": len(gen.questions), "gold_documents": len(planted)}
    counts = {"documents": n_docs, "chunks": n_chunks, "dead_lettered": 0, "duplicates": 0, "near_duplicates": 0}
    vdir = gen.src.version_dir
    summary = _summary(vdir, name, counts, {
        "listed": n_docs, "read": n_docs, "unique": n_docs, "parsed": n_docs, "parsed_documents": n_docs,
        "added": n_docs, "embedded": n_chunks, "bytes_read": 0, "previous_version": None}, info)
    _write_outputs(version_dir, _manifest(vdir, gen.src, name, counts, info), summary)
    return {"version_dir": version_dir, "rows": n_chunks, "documents": n_docs, "files": n_files,
            "bytes": dir_bytes(version_dir), "seconds": round(time.perf_counter() - t0, 2), "gold": gold,
            "synthetic": info}


def questions_for(pool: Pool, gold: dict, n: int) -> list[dict]:
    """The first n of the pool's questions that have a gold map entry, as the answer job reads them."""
    return [{"id": q["id"], "question": q["question"]} for q in pool.questions if q["id"] in gold][:n]


def recall_at(answers_path: str, gold: dict, k: int = 10) -> tuple[float, int]:
    """(share of the answered questions with a gold document among their top k retrieved
    documents, questions counted), from an answer job's JSONL output."""
    hit = n = 0
    with open(answers_path, encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            g = gold.get(r.get("id"))
            if g is None:
                continue
            n += 1
            top = {d["doc_id"] for d in (r.get("retrieved_docs") or [])[:k]}
            hit += bool(top & set(g["doc_ids"]))
    return (hit / n if n else float("nan")), n


def expected_terms(gen: Generator, n_chunks: int) -> dict:
    """What the vocabulary model and Heaps' fit expect for n_chunks (BM25 terms)."""
    n = n_chunks * gen.tokens_per_chunk
    st = gen.pool.stats
    return {"chunks": n_chunks, "tokens": round(n), "heaps": round(st["K"] * n ** st["beta"]),
            "model": round(gen.vocab.expected_terms(n, gen.v_fixed, gen.draws_per_token))}


# --- how close the noise is to the model's own -----------------------------------------------

def measure_noise(pool: Pool, n: int = 200, seed: int = 0, config: Optional[str] = None) -> dict:
    """Two re-samplings of each of n pool documents (first chunk), their texts embedded by the
    project's model: the mean cosine of a re-sampled text to its pool vector (to_pool), and of the
    two re-samplings to each other (mutual): how far the model itself moves a re-sampled text. With
    isotropic noise the two are c and c^2 for c = 1 / sqrt(1 + dim sigma^2); sigma_for_mutual
    gives the mutual cosine the model gives (the neighbourhoods' density), sigma_for_to_pool the other."""
    from configs.schema import load_config
    from transforms.ingest.embed import Embedder, model_spec_from_config
    gen = Generator(pool, seed, sigma=0.0)
    rng = np.random.default_rng([seed, 99])
    picks = rng.choice(len(gen.t.parents), min(n, len(gen.t.parents)), replace=False)
    a, b = [], []
    for i, k in enumerate(picks):
        rows = gen.t.docs[gen.t.parents[k]][:1]
        a.append(gen.resample(np.random.default_rng([seed, 1, i]), rows, i).chunks[0])
        b.append(gen.resample(np.random.default_rng([seed, 2, i]), rows, i).chunks[0])
    model = Embedder(model_spec_from_config(load_config(config)))
    ea, eb = (_unit(model.encode([f"{c.context}\n{c.text}" if c.context else c.text for c in cs])) for cs in (a, b))
    to_pool = float(np.mean(np.sum(ea * gen.src.emb[[c.row for c in a]], axis=1)))
    mutual = float(np.mean(np.sum(ea * eb, axis=1)))
    sigma = lambda c: round(math.sqrt(max(0.0, 1.0 / c ** 2 - 1.0) / gen.src.dim), 4)  # noqa: E731
    return {"documents": len(a), "to_pool": round(to_pool, 4), "mutual": round(mutual, 4),
            "sigma_for_to_pool": sigma(to_pool), "sigma_for_mutual": sigma(math.sqrt(max(mutual, 1e-6))),
            "swap": gen.swap}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.scale_corpus", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="the version directory to write")
    ap.add_argument("--chunks", type=int)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sigma", type=float, default=SIGMA)
    ap.add_argument("--rows-per-file", type=int, default=50_000)
    ap.add_argument("--gold", help="where the gold map goes (default: <out>.gold.json)")
    ap.add_argument("--pool", choices=["shared", "sample"], help="default: shared when the dev corpora are there")
    ap.add_argument("--data", help="the dev corpora (default ../shared/data)")
    ap.add_argument("--questions", type=int,
                    help="plant the gold documents of the pool's first N questions (default all)")
    ap.add_argument("--overwrite", action="store_true", help="remove --out first")
    ap.add_argument("--measure-noise", type=int, metavar="N", help="embed N synthetic chunks instead")
    a = ap.parse_args(argv)
    pool = build_pool(a.data and Path(a.data), name=a.pool)
    if a.measure_noise:
        print(json.dumps(measure_noise(pool, a.measure_noise, a.seed)))
        return 0
    if not a.out or not a.chunks:
        ap.error("give --out and --chunks (or --measure-noise N)")
    if a.overwrite and os.path.isdir(a.out):
        shutil.rmtree(a.out)
    r = write_realistic_version(pool, a.out, a.chunks, a.seed, a.rows_per_file, sigma=a.sigma,
                                questions=a.questions, log=_log)
    gold_path = a.gold or os.path.normpath(a.out) + ".gold.json"
    with open(gold_path, "w", encoding="utf-8") as f:
        json.dump(r.pop("gold"), f, indent=0)
    print(json.dumps({**r, "gold": gold_path}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
