"""The real text the scale bench's synthetic corpus is re-sampled from.

    python -m bench.scale_pool            # build (once) and print the pool's figures, Heaps' law fit included

A pool is made of the dev corpora in ../shared/data (cranfield, vaswani-npl, msmarco-trecdl19-subset,
squad-dev-half, debian-docs) or, when those are missing (tests), of samples/corpus:
  stats      every document of those corpora analysed as BM25 analyses chunks (bm25_tokens + Porter):
             Heaps' law V = K n^beta fitted on the growth curve (n BM25 tokens, V distinct terms), and
             the term ranking the vocabulary model draws from (bench/scale_text.py)
  rows       the chunk rows (texts, sentence spans, vectors) of a real index, built once with the real
             pipeline from a subset of those documents (chunks_per_corpus each, gold documents first)
  questions  real dev-set questions (queries.jsonl with their qrels) whose gold documents are in the
             subset; none is a substring of its gold document (case and spaces ignored)
Cached under out/scale/pool-<name>/ (stats.json, lexicon.arrow, questions.jsonl, index/).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import shutil
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parent.parent
SHARED_DATA = ROOT.parent / "shared" / "data"
SAMPLE_CORPUS = ROOT / "samples" / "corpus"
SAMPLE_QUESTIONS = ROOT / "samples" / "questions.jsonl"
SCALE_DIR = ROOT / "out" / "scale"
BEIR_SETS = ("cranfield", "vaswani-npl", "msmarco-trecdl19-subset", "squad-dev-half")
DEBIAN = "debian-docs"
CHUNKS_PER_CORPUS = 1500  # real chunks embedded per corpus (~13 chunks/s on 2 loaded cores: ~10 min once)
QUESTIONS_PER_CORPUS = 150
GOLD_PER_QUESTION = 3  # at most, of the question's best-graded documents
MAX_GOLD_CHARS = 20_000  # a gold document longer than this (~40 chunks) is not planted
CHARS_PER_CHUNK = 480  # measured on the sample index: a chunk's text, for the budget estimate
HEAPS_SHUFFLES = 4  # growth curves averaged over this many document orders
HEAPS_FIT_FROM = 0.01  # fit on n >= this share of the tokens (the curve's upper two decades)


def _log(*a) -> None:
    print(*a, file=sys.stderr, flush=True)


@dataclass
class RealDoc:
    corpus: str
    key: str  # path under the pool corpus folder: "<set>/corpus.jsonl" or "debian-docs/<path>"
    record: Optional[str]  # a JSONL record's id
    title: str
    text: str

    @property
    def ref(self) -> str:
        return self.key + ("#" + self.record if self.record is not None else "")


def pool_name(data_dir: Optional[Path] = None) -> str:
    """"shared" when every dev corpus is there, else "sample" (samples/corpus: what tests use)."""
    base = Path(data_dir) if data_dir else SHARED_DATA
    ok = all((base / s / "corpus.jsonl").exists() for s in BEIR_SETS) and (base / DEBIAN / "docs").is_dir()
    return "shared" if ok else "sample"


# --- the real documents ----------------------------------------------------------------------

def _parsed(folder: Path, prefix: str, corpus: str) -> list[RealDoc]:
    """Every file under folder through the project's parsers (unreadable ones skipped)."""
    from transforms.ingest.parse import parse_object
    from transforms.records import RawObject
    out = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        key = prefix + path.relative_to(folder).as_posix()
        try:
            docs = parse_object(RawObject.from_bytes(str(path), key, path.read_bytes()))
        except Exception:  # the samples hold a deliberately broken PDF
            continue
        for d in docs:
            out.append(RealDoc(corpus, key, d.metadata.get("record_id"), d.title or "", d.text))
    return out


def real_documents(name: str, data_dir: Optional[Path] = None) -> list[RealDoc]:
    if name == "sample":
        return _parsed(SAMPLE_CORPUS, "", "sample")
    base = Path(data_dir) if data_dir else SHARED_DATA
    docs = []
    for s in BEIR_SETS:
        with open(base / s / "corpus.jsonl", encoding="utf-8") as f:
            for line in f:
                r = json.loads(line)
                if (r.get("text") or "").strip():
                    docs.append(RealDoc(s, f"{s}/corpus.jsonl", str(r["_id"]), r.get("title") or "", r["text"]))
    return docs + _parsed(base / DEBIAN / "docs", DEBIAN + "/", DEBIAN)


# --- Heaps' law and the term ranking ---------------------------------------------------------

def analyzer():
    from transforms.common.duck import connect
    from transforms.index.bm25 import Analyzer
    from transforms.index.segments import BM25_STEMMER
    return Analyzer(connect(":memory:"), BM25_STEMMER)


def heaps_curve(token_lists: list[list[str]], seed: int = 0, points: int = 60) -> tuple[np.ndarray, np.ndarray]:
    """(n, V): distinct terms V after n tokens, documents in a seeded random order."""
    order = list(range(len(token_lists)))
    random.Random(seed).shuffle(order)
    total = sum(map(len, token_lists))
    grid = np.unique(np.geomspace(100, max(101, total), points).astype(np.int64))
    seen: set = set()
    n, gi, vs = 0, 0, []
    for i in order:
        for t in token_lists[i]:
            n += 1
            seen.add(t)
            while gi < len(grid) and grid[gi] == n:
                vs.append(len(seen))
                gi += 1
    return grid[:len(vs)], np.asarray(vs, np.int64)


def fit_heaps(token_lists: list[list[str]], shuffles: int = HEAPS_SHUFFLES, fit_from: float = HEAPS_FIT_FROM) -> dict:
    """K, beta of V = K n^beta, least squares in log space on the mean curve of `shuffles` document
    orders, over n >= fit_from of the tokens."""
    curves = [heaps_curve(token_lists, seed) for seed in range(shuffles)]
    n = curves[0][0]
    v = np.mean([c[1] for c in curves], axis=0)
    m = n >= fit_from * n[-1]
    beta, log_k = np.polyfit(np.log(n[m]), np.log(v[m]), 1)
    return {"K": round(float(np.exp(log_k)), 4), "beta": round(float(beta), 4), "tokens": int(n[-1]),
            "types": int(v[-1]), "fit_from_tokens": int(n[m][0]), "shuffles": shuffles,
            "curve": [[int(a), round(float(b), 1)] for a, b in zip(n, v)]}


_ALPHA = re.compile(r"[a-z]+")


def text_stats(docs: list[RealDoc], log=_log) -> tuple[dict, pa.Table]:
    """(stats, lexicon): Heaps' fit of the documents' BM25 terms, and every term by falling count
    (term, count, surface: its most frequent lower-case word when it is a plain word's stem)."""
    from transforms.index.bm25 import bm25_tokens
    an = analyzer()
    t0 = time.perf_counter()
    toks, counts, surface = [], Counter(), defaultdict(Counter)
    for lo in range(0, len(docs), 500):
        texts = [d.title + "\n" + d.text for d in docs[lo:lo + 500]]
        got = an.analyze(texts)
        toks += got
        for ts in got:
            counts.update(ts)
        words = Counter(w for t in texts for w in bm25_tokens(t) if _ALPHA.fullmatch(w))
        for w, stems in zip(list(words), an.analyze(list(words))):
            if stems:
                surface[stems[0]][w] += words[w]
    stats = fit_heaps(toks)
    stats.update(documents=len(docs), seconds=round(time.perf_counter() - t0, 1))
    terms = sorted(counts, key=lambda t: (-counts[t], t))
    lexicon = pa.table({"term": terms, "count": pa.array([counts[t] for t in terms], pa.int64()),
                        "surface": [surface[t].most_common(1)[0][0] if surface.get(t) else None for t in terms]})
    log(f"scale_pool: {stats['tokens']:,} tokens, {stats['types']:,} terms, Heaps K={stats['K']} "
        f"beta={stats['beta']} ({stats['seconds']} s)")
    return stats, lexicon


# --- questions with gold documents -----------------------------------------------------------

def _norm(s: str) -> str:
    return " ".join(s.lower().split())


def _qrels(path: Path) -> dict[str, list[tuple[str, int]]]:
    out = defaultdict(list)
    with open(path, encoding="utf-8") as f:
        next(f)
        for line in f:
            q, d, s = line.rstrip("\n").split("\t")[:3]
            if int(s) > 0:
                out[q].append((d, int(s)))
    return out


def candidate_questions(name: str, docs: list[RealDoc], data_dir: Optional[Path] = None, seed: int = 0,
                        per_corpus: int = QUESTIONS_PER_CORPUS) -> list[dict]:
    """{"id", "question", "corpus", "gold": [doc refs]}, interleaved across corpora (a prefix of
    the list is balanced). A question is kept when its gold documents exist, are at most
    MAX_GOLD_CHARS long, and it is no substring of any of them (case and spaces ignored)."""
    by_ref = {d.ref: d for d in docs}
    by_key = defaultdict(list)
    for d in docs:
        by_key[d.key].append(d)
    raw: dict[str, list[tuple[str, str, list[str]]]] = defaultdict(list)  # corpus -> (qid, text, gold refs)
    if name == "sample":
        with open(SAMPLE_QUESTIONS, encoding="utf-8") as f:
            for q in map(json.loads, f):
                if q.get("acl"):  # the answer job runs without groups: such a question has no answer
                    continue
                refs = [d.ref for d in by_key.get(q["expected_key"], [])
                        if q.get("expected_doc_id") in (None, d.record)]
                raw["sample"].append((q["id"], q["question"], refs))
    else:
        base = Path(data_dir) if data_dir else SHARED_DATA
        for s in (*BEIR_SETS, DEBIAN):
            qrels = _qrels(base / s / "qrels" / "test.tsv")
            with open(base / s / "queries.jsonl", encoding="utf-8") as f:
                for q in map(json.loads, f):
                    judged = sorted(qrels.get(str(q["_id"]), []), key=lambda x: (-x[1], x[0]))
                    best = [d for d, g in judged if g == judged[0][1]] if judged else []
                    rng = random.Random(f"{seed}:{s}:{q['_id']}")
                    best = sorted(rng.sample(best, min(GOLD_PER_QUESTION, len(best))))
                    refs = [f"{s}/corpus.jsonl#{d}" if s != DEBIAN else f"{DEBIAN}/{d}" for d in best]
                    # a debian-docs file may parse into several documents: all of them are gold
                    refs = [r for ref in refs
                            for r in ([ref] if ref in by_ref else [x.ref for x in by_key.get(ref, [])])]
                    raw[s].append((f"{s}:{q['_id']}", q["text"].strip(), refs))
    per: dict[str, list[dict]] = {}
    for corpus, qs in raw.items():
        kept = []
        for qid, text, refs in qs:
            gold = [by_ref[r] for r in refs if r in by_ref]
            if not gold or len(text.split()) < 3 or any(len(g.text) > MAX_GOLD_CHARS for g in gold):
                continue
            if any(_norm(text) in _norm(g.title + "\n" + g.text) for g in gold):
                continue
            kept.append({"id": qid, "question": text, "corpus": corpus, "gold": refs})
        random.Random(f"{seed}:{corpus}").shuffle(kept)
        per[corpus] = kept[:per_corpus]
    out = []
    for i in range(max(map(len, per.values()), default=0)):
        out += [qs[i] for qs in per.values() if i < len(qs)]
    return out


# --- the pool's real index -------------------------------------------------------------------

def select_documents(docs: list[RealDoc], questions: list[dict], seed: int = 0,
                     chunks_per_corpus: int = CHUNKS_PER_CORPUS) -> list[RealDoc]:
    """Per corpus: the gold documents, then documents in a seeded order while the estimated chunks
    stay within chunks_per_corpus."""
    gold = {r for q in questions for r in q["gold"]}
    by_corpus = defaultdict(list)
    for d in docs:
        by_corpus[d.corpus].append(d)
    out = []
    for corpus, ds in sorted(by_corpus.items()):
        est = lambda d: max(1, -(-len(d.text) // CHARS_PER_CHUNK))  # noqa: E731
        picked = [d for d in ds if d.ref in gold]
        budget = chunks_per_corpus - sum(map(est, picked))
        rest = [d for d in ds if d.ref not in gold]
        random.Random(f"{seed}:{corpus}").shuffle(rest)
        for d in rest:
            if est(d) <= budget:
                picked.append(d)
                budget -= est(d)
        out += picked
    return out


def write_pool_corpus(docs: list[RealDoc], folder: Path, data_dir: Optional[Path] = None) -> None:
    """The selected documents as an index input: a JSONL file per BEIR set, debian files copied."""
    base = Path(data_dir) if data_dir else SHARED_DATA
    shutil.rmtree(folder, ignore_errors=True)
    records = defaultdict(list)
    for d in docs:
        if d.record is not None:
            records[d.key].append({"_id": d.record, "title": d.title, "text": d.text})
        else:
            dest = folder / d.key
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(base / DEBIAN / "docs" / d.key[len(DEBIAN) + 1:], dest)
    for key, recs in records.items():
        (folder / key).parent.mkdir(parents=True, exist_ok=True)
        with open(folder / key, "w", encoding="utf-8") as f:
            f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in recs)


def row_refs(rows: pa.Table, corpus_root: str) -> list[list[str]]:
    """Per chunk row, the refs (RealDoc.ref) of the documents it came from (several when dedupe
    merged identical files)."""
    out = []
    for uris, meta in zip(rows.column("source_uris").to_pylist(), rows.column("metadata").to_pylist()):
        rec = json.loads(meta or "{}").get("record_id")
        keys = [os.path.relpath(u, corpus_root).replace(os.sep, "/") for u in (uris or [])]
        out.append([k + ("#" + str(rec) if rec is not None else "") for k in keys])
    return out


@dataclass
class Pool:
    name: str
    rows: pa.Table  # chunk rows of the real index (chunk_schema)
    refs: list[list[str]]  # per row: the real documents it came from
    questions: list[dict]  # {"id", "question", "corpus", "gold": [refs]}
    stats: dict  # Heaps' fit and counts (stats.json)
    lexicon: pa.Table  # term, count, surface (lexicon.arrow)


def pool_dir(name: str) -> Path:
    return SCALE_DIR / f"pool-{name}"


def build_pool(data_dir: Optional[Path] = None, *, name: Optional[str] = None, config: Optional[str] = None,
               chunks_per_corpus: int = CHUNKS_PER_CORPUS, questions_per_corpus: int = QUESTIONS_PER_CORPUS,
               seed: int = 0, cache_dir: Optional[Path] = None, log=_log) -> Pool:
    """The pool of `name` ("shared" or "sample"; default: shared when data_dir (../shared/data)
    has every dev corpus), built once and cached in cache_dir (default out/scale/pool-<name>/)."""
    from bench.scale_data import SOURCE_INDEXES, make_source_rows
    name = name or pool_name(data_dir)
    d = Path(cache_dir) if cache_dir else pool_dir(name)
    d.mkdir(parents=True, exist_ok=True)
    spec = {"name": name, "chunks_per_corpus": chunks_per_corpus, "questions_per_corpus": questions_per_corpus,
            "seed": seed}
    stats_path, lex_path, q_path = d / "stats.json", d / "lexicon.arrow", d / "questions.jsonl"
    cached = _read_json(stats_path).get("spec") == spec and lex_path.exists() and q_path.exists()
    if not cached:
        docs = real_documents(name, data_dir)
        stats, lexicon = text_stats(docs, log)
        questions = candidate_questions(name, docs, data_dir, seed, questions_per_corpus)
        if name == "shared":
            chosen = select_documents(docs, questions, seed, chunks_per_corpus)
            write_pool_corpus(chosen, d / "corpus", data_dir)
            shutil.rmtree(d / "index", ignore_errors=True)
            stats["pool_documents"] = len(chosen)
        with pa.OSFile(str(lex_path), "wb") as sink, pa.ipc.new_file(sink, lexicon.schema) as w:
            w.write_table(lexicon)
        with open(q_path, "w", encoding="utf-8") as f:
            f.writelines(json.dumps(q, ensure_ascii=False) + "\n" for q in questions)
        stats["spec"] = spec
        with open(stats_path, "w", encoding="utf-8") as f:
            json.dump(stats, f, indent=1)
    if name == "sample":  # samples/corpus whole: the index make_source_rows makes (out/scale/source-index)
        index = str(d / "index") if cache_dir else str(SOURCE_INDEXES["sample"])
        rows, root = make_source_rows("sample", index, config=config, log=log), str(SAMPLE_CORPUS)
    else:
        rows = _index_rows(str(d / "corpus"), str(d / "index"), config, log)
        root = str(d / "corpus")
    with pa.memory_map(str(lex_path)) as src:
        lexicon = pa.ipc.open_file(src).read_all()
    with open(q_path, encoding="utf-8") as f:
        questions = [json.loads(line) for line in f]
    stats = _read_json(stats_path)
    stats["pool_chunks"] = rows.num_rows
    return Pool(name, rows, row_refs(rows, root), questions, stats, lexicon)


def _index_rows(corpus: str, index_dir: str, config: Optional[str], log) -> pa.Table:
    from transforms.index import publish
    from transforms.index.shards import CHUNKS_DIR, read_table
    if publish.current_version(index_dir) is None:
        from configs.schema import load_config
        from pipelines.index import run_index
        log(f"scale_pool: indexing {corpus} into {index_dir} (real pipeline, once)")
        t0 = time.perf_counter()
        s = run_index(load_config(config), corpus, index_dir, progress=False, log=lambda *_: None)
        log(f"scale_pool: {s['chunks']} chunks of {s['documents']} documents in {time.perf_counter() - t0:.0f} s")
    from bench.scale_data import SOURCE_VERSION_KEY
    vdir = publish.resolve_index(index_dir)
    t = read_table(vdir, CHUNKS_DIR)
    return t.replace_schema_metadata({**(t.schema.metadata or {}), SOURCE_VERSION_KEY: vdir.encode()})


def _read_json(path: Path) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def pool_digest(pool: Pool) -> str:
    """Names what a synthetic version made from this pool depends on (its rows and questions)."""
    h = hashlib.sha256(json.dumps(pool.stats.get("spec"), sort_keys=True).encode())
    for c in pool.rows.column("chunk_id").to_pylist():
        h.update(c.encode())
    return h.hexdigest()[:12]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.scale_pool", description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", help="the dev corpora (default ../shared/data; samples/corpus when missing)")
    ap.add_argument("--name", choices=["shared", "sample"])
    ap.add_argument("--chunks-per-corpus", type=int, default=CHUNKS_PER_CORPUS)
    ap.add_argument("--questions-per-corpus", type=int, default=QUESTIONS_PER_CORPUS)
    a = ap.parse_args(argv)
    p = build_pool(Path(a.data) if a.data else None, name=a.name, chunks_per_corpus=a.chunks_per_corpus,
                   questions_per_corpus=a.questions_per_corpus)
    by_corpus = Counter(q["corpus"] for q in p.questions)
    print(json.dumps({"pool": p.name, **{k: v for k, v in p.stats.items() if k != "curve"},
                      "questions": len(p.questions), "questions_by_corpus": dict(by_corpus)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
