"""The answer job's first-stage search, timed per question, against a baseline in one run.

python -m bench.search_bench [--chunks 250000] [--segment 250000] [--corpus realistic|copies]
                             [--index DIR] [--questions 500]
                             [--threads 1] [--baseline main] [--profile] [--out FILE]
                             [--ann 32,64,128]

Searches out/search_bench/<corpus>-<chunks>-<segment> (a synthetic version with its segments,
built once: bench/scale_corpus.py's realistic text and real questions, or --corpus copies,
bench/scale_data.py's repeated sample rows) or the live version of --index DIR; questions from
--questions-file, the index's questions.jsonl or the sample rows' first sentences, embedded once
outside the timings. Per code path (this tree's searcher, then
--baseline REF's segment_search.py loaded from git, both under this tree's engine): CPU per
question (time.process_time) by phase: open, search (dense, BM25, hits), gather, fuse, answer.
Exits 1 when the two paths rank any question differently. --ann EFS searches the same corpus
built with index.ann hnsw (<dir>-hnsw/, each segment with its HNSW graph) exactly, then with
retrieve.mode ann at each efSearch: search CPU per question (the graphs' loading counted in open)
and recall@10 against exact of the dense top 10 and of the fused first-stage ranking (what the
answer step receives). Figures: docs/benchmarks.md.
"""
from __future__ import annotations

import argparse
import cProfile
import hashlib
import inspect
import io
import json
import os
import pstats
import shutil
import subprocess
import sys
import time
import types
from typing import Optional

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORK = os.path.join(ROOT, "out", "search_bench")


def _cfg(segment: int, **env):
    from configs.schema import load_config
    return load_config(environ={"RAGBEAM__INDEX__SEGMENT_MAX_CHUNKS": str(segment), **env})


def _ann_env(ann: bool) -> dict:
    return {"RAGBEAM__INDEX__ANN": "hnsw"} if ann else {}


def make_index(n: int, segment: int, corpus: str = "realistic", data: Optional[str] = None, log=print,
               ann: bool = False) -> str:
    """out/search_bench/<corpus>-<n>-<segment>[-hnsw]/: a synthetic version with its segments (made
    once; -hnsw: built with index.ann hnsw, each segment with its graph). realistic:
    bench/scale_corpus.py (re-sampled dev-corpus text; the pool's real dev-set questions beside it as
    questions.jsonl); copies: bench/scale_data.py (the sample rows repeated). A folder whose rows
    were written (ROWS) but whose segments were not builds only those."""
    idx = os.path.join(WORK, (f"{corpus}-{n}-{segment}" if corpus != "copies" else f"idx-{n}-{segment}")
                       + ("-hnsw" if ann else ""))
    done = os.path.join(idx, "BUILT")
    if os.path.exists(done):
        return idx
    name = f"v{n}"
    vdir = os.path.join(idx, "versions", name)
    if os.path.exists(os.path.join(idx, "ROWS")):
        return _build_segments(idx, segment, ann, log)
    shutil.rmtree(idx, ignore_errors=True)
    log(f"search_bench: writing {n} synthetic chunks ({corpus})")
    if corpus == "copies":
        from bench.scale_data import make_source_rows, write_synthetic_version
        write_synthetic_version(make_source_rows(), vdir, n, seed=0)
    else:
        from pathlib import Path
        from bench.scale_corpus import write_realistic_version
        from bench.scale_pool import build_pool
        pool = build_pool(Path(data) if data else None)
        write_realistic_version(pool, vdir, n, seed=0)
        with open(os.path.join(idx, "questions.jsonl"), "w", encoding="utf-8") as f:  # timing needs no gold
            f.writelines(json.dumps({"id": q["id"], "question": q["question"]}) + "\n" for q in pool.questions)
    with open(os.path.join(idx, "CURRENT"), "w", encoding="utf-8") as f:
        f.write(name + "\n")
    with open(os.path.join(idx, "ROWS"), "w", encoding="utf-8") as f:
        f.write(name + "\n")
    return _build_segments(idx, segment, ann, log)


def _build_segments(idx: str, segment: int, ann: bool, log=print) -> str:
    from pipelines.segments import rebuild_segments
    from transforms.index import publish
    log(f"search_bench: building segments of {segment} chunks" + (" with HNSW graphs" if ann else ""))
    got = rebuild_segments(_cfg(segment, **_ann_env(ann)), idx)
    log(f"search_bench: {len(got['segments'])} segments in {got['artifact_s']} s")
    with open(os.path.join(idx, "BUILT"), "w", encoding="utf-8") as f:
        f.write(publish.resolve_index(idx) + "\n")
    return idx


def questions(n: int, path: Optional[str] = None) -> list[str]:
    """n question texts: from a JSONL file (`question`, or BEIR `text`), else the scale bench's (the first
    sentence of each sample row, 200 characters at most)."""
    if path:
        with open(path, encoding="utf-8") as f:
            qs = [(lambda r: r.get("question") or r["text"])(json.loads(line)) for line in f if line.strip()]
        return qs[:n]
    from bench.scale_data import make_source_rows
    from transforms.common.sentences import split_sentences
    rows = make_source_rows().column("text").to_pylist()
    qs: list[str] = []
    for t in rows * (1 + n // max(1, len(rows))):
        s = split_sentences(t or "")
        if s:
            qs.append(s[0][:200])
        if len(qs) == n:
            break
    return qs


def _query_vectors(side, texts: list[str]) -> np.ndarray:
    """The questions' vectors, embedded once and cached under out/search_bench/."""
    key = hashlib.sha256("\n".join(texts).encode()).hexdigest()[:16]
    path = os.path.join(WORK, f"qvecs-{key}.npy")
    if os.path.exists(path):
        return np.load(path)
    v = np.asarray(side.query_vectors(texts), np.float32)
    os.makedirs(WORK, exist_ok=True)
    np.save(path, v)
    return v


def baseline_module(ref: str):
    """transforms/query/segment_search.py as it is at git `ref`, loaded as a module."""
    src = subprocess.run(["git", "show", f"{ref}:transforms/query/segment_search.py"], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout
    mod = types.ModuleType(f"segment_search_at_{ref}")
    sys.modules[mod.__name__] = mod  # dataclasses look their module up
    exec(compile(src, f"{ref}:transforms/query/segment_search.py", "exec"), mod.__dict__)
    return mod


class _Clock:
    """CPU seconds (process_time: every thread of the process) and wall seconds per phase."""

    def __init__(self):
        self.cpu: dict[str, float] = {}
        self.wall: dict[str, float] = {}

    def timed(self, phase: str, fn, *args, **kw):
        c, w = time.process_time(), time.perf_counter()
        try:
            return fn(*args, **kw)
        finally:
            self.cpu[phase] = self.cpu.get(phase, 0.0) + time.process_time() - c
            self.wall[phase] = self.wall.get(phase, 0.0) + time.perf_counter() - w

    def wrap(self, obj, method: str, phase: str) -> None:
        """Time obj.method under `phase` (an instance attribute shadowing the class's)."""
        fn = getattr(obj, method)
        setattr(obj, method, lambda *a, **kw: self.timed(phase, fn, *a, **kw))


def first_stage(module, side, cfg, qn, terms, words, batch: int, clock: _Clock, max_segments: Optional[int] = None,
                threads: int = 1, ann_ef: Optional[int] = None):
    """The answer job's first stage with `module`'s SegmentSearcher: each segment opened, every
    batch searched, released (SearchSegmentFn's shape); then each question's hits gathered and
    fused (GatheredAnswerFn's). Returns the rankings."""
    from transforms.query.segment_search import gather
    rc, vs = cfg.retrieve, side.segments
    n_seg = min(len(vs), max_segments or len(vs))
    per_seg = []
    for i in range(n_seg):
        df, dead = vs.stats(i)
        kw = {"threads": threads} if "threads" in inspect.signature(module.SegmentSearcher).parameters else {}
        if ann_ef:
            kw["ann_ef_search"] = ann_ef
        s = clock.timed("open", module.SegmentSearcher, vs.segment(i), int(vs.offsets[i]), df, dead, vs.num_docs,
                        vs.avgdl, k1=rc.bm25_k1 or 1.2, b=rc.bm25_b or 0.75, **kw)
        if ann_ef and getattr(s, "ann_ef_search", None):  # the graph read, its vectors attached: part of opening
            clock.timed("open", s.ann_graph)
        if threads == 1:  # CPU is process-wide: phases overlapping on threads cannot be told apart
            for method, phase in (("dense_top", "dense"), ("bm25_top", "bm25"), ("hits", "hits")):
                if hasattr(s, method):
                    clock.wrap(s, method, phase)
        hits = []
        for lo in range(0, len(qn), batch):
            sl = slice(lo, lo + batch)
            hits += clock.timed("search", s.search, terms[sl], words[sl], qn[sl], rc.dense_top_n, rc.bm25_top_n)
        per_seg.append(hits)
        del s
        vs.release(i)
    gathered = clock.timed("gather", lambda: [gather([h[j] for h in per_seg], terms[j], rc.dense_top_n,
                                                     rc.bm25_top_n, side.num_docs) for j in range(len(qn))])
    return clock.timed("fuse", side.rankings, gathered, qn, terms)


def _same(a, b) -> bool:
    def lists(r):
        return [[c for c, _ in r.dense], [c for c, _ in r.bm25], [c for c, _ in r.fused]]

    def scores(r):
        return np.array([s for _, s in r.dense + r.bm25 + r.fused], np.float64)
    return lists(a) == lists(b) and np.allclose(scores(a), scores(b), rtol=0, atol=1e-9)


def run(a) -> dict:
    from transforms.index import publish
    from transforms.ingest.embed import model_spec_from_config
    from transforms.query.engine import AnswerSide
    from transforms.query import segment_search
    from transforms.query.records import Question
    ann = [int(x) for x in str(a.ann or "").split(",") if x.strip()]
    idx = a.index or make_index(a.chunks, a.segment, a.corpus, a.data, ann=bool(ann))
    cfg = _cfg(a.segment)
    qfile = a.questions_file or (os.path.join(idx, "questions.jsonl")
                                 if os.path.exists(os.path.join(idx, "questions.jsonl")) else None)
    vdir = publish.resolve_index(idx)
    side = AnswerSide(vdir, cfg, model_spec_from_config(cfg))
    n_seg = min(len(side.segments), a.max_segments or len(side.segments))
    chunks = int(side.segments.offsets[n_seg])
    texts = questions(a.questions, qfile)
    qv = _query_vectors(side, texts)
    qn = qv / np.clip(np.linalg.norm(qv, axis=1, keepdims=True), 1e-12, None)
    prep = _Clock()
    terms, words = prep.timed("analyze", side.analyze, texts)
    # the baseline first: a cold page cache would slow it, not this tree
    paths = ([(f"baseline {a.baseline}", baseline_module(a.baseline))] if a.baseline else []) + \
        [("this tree", segment_search)]
    out = {"index": vdir, "corpus": "given" if a.index else a.corpus, "chunks": chunks, "segments": n_seg,
           **({"ann_ef_search": ann} if ann else {}),
           "questions": len(texts), "batch": a.batch,
           "threads": a.threads, "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS", "default"),
           "analyze_cpu_ms_per_question": round(prep.cpu["analyze"] * 1000 / len(texts), 3), "paths": {}}
    got = {}
    for name, module in paths:
        clock = _Clock()
        prof = cProfile.Profile() if a.profile else None
        if prof:
            prof.enable()
        got[name] = first_stage(module, side, cfg, qn, terms, words, a.batch, clock, a.max_segments, a.threads)
        if prof:
            prof.disable()
            buf = io.StringIO()
            pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(14)
            print(f"--- profile, {name} ---\n" + "\n".join(buf.getvalue().splitlines()[4:28]), file=sys.stderr)
        per_q = {k: round(v * 1000 / len(texts), 3) for k, v in clock.cpu.items()}
        search = sum(per_q.get(k, 0.0) for k in ("open", "search", "gather"))
        out["paths"][name] = {"cpu_ms_per_question": per_q, "search_cpu_ms_per_question": round(search, 3),
                              "search_wall_ms_per_question": round(sum(clock.wall.get(k, 0.0) for k in (
                                  "open", "search", "gather")) * 1000 / len(texts), 3)}
    if ann:
        out["ann"] = ann_runs(side, cfg, qn, terms, words, a, got["this tree"],
                              out["paths"]["this tree"]["search_cpu_ms_per_question"])
    if a.baseline:
        base, new = got[paths[0][0]], got[paths[1][0]]
        same = sum(_same(x, y) for x, y in zip(base, new))
        out["same_rankings"] = f"{same}/{len(texts)}"
        b, n = (out["paths"][p[0]]["search_cpu_ms_per_question"] for p in paths)
        out["speedup"] = round(b / n, 2) if n else None
    if a.answer and n_seg == len(side.segments):
        clock = _Clock()
        qs = [Question(f"q{j}", t) for j, t in enumerate(texts)]
        rankings = got["this tree"]
        for lo in range(0, len(qs), a.batch):
            sl = slice(lo, lo + a.batch)
            clock.timed("answer", side.finish, qs[sl], qv[sl], rankings[sl], cfg.output.retrieved_top_k)
        out["answer_cpu_ms_per_question"] = round(clock.cpu["answer"] * 1000 / len(texts), 3)
    side.close()
    return out


def recall_at(exact, approx, k: int = 10) -> float:
    """Mean share of each exact top k (chunk numbers) that the approximate top k holds."""
    got = [len({c for c, _ in x[:k]} & {c for c, _ in y[:k]}) / max(1, min(k, len(x))) for x, y in zip(exact, approx)]
    return round(float(np.mean(got)), 4) if got else 1.0


def ann_runs(side, cfg, qn, terms, words, a, exact, exact_ms: float) -> list[dict]:
    """retrieve.mode ann at each efSearch: search CPU per question (as the exact path's), the
    speedup over exact, and recall@10 against exact of the dense list and of the fused one (what
    the answer step receives); the HNSW graphs are loaded once per segment (open) as a worker does."""
    from transforms.query import segment_search
    runs = []
    for ef in [int(x) for x in str(a.ann).split(",") if x.strip()]:
        clock = _Clock()
        got = first_stage(segment_search, side, cfg, qn, terms, words, a.batch, clock, a.max_segments, a.threads,
                          ann_ef=ef)
        per_q = {k: round(v * 1000 / len(qn), 3) for k, v in clock.cpu.items()}
        search = round(sum(per_q.get(k, 0.0) for k in ("open", "search", "gather")), 3)
        runs.append({"ef_search": ef, "cpu_ms_per_question": per_q, "search_cpu_ms_per_question": search,
                     "speedup": round(exact_ms / search, 2) if search else None,
                     "recall_at_10_dense": recall_at([r.dense for r in exact], [r.dense for r in got]),
                     "recall_at_10_fused": recall_at([r.fused for r in exact], [r.fused for r in got]),
                     "same_fused_top10": sum([c for c, _ in x.fused[:10]] == [c for c, _ in y.fused[:10]]
                                             for x, y in zip(exact, got))})
        print(f"search_bench: ann efSearch {ef}: {runs[-1]}", file=sys.stderr)
    return runs


def _commit() -> str:
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                          text=True).stdout.strip()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.search_bench", description=__doc__.splitlines()[0])
    ap.add_argument("--chunks", type=int, default=250_000)
    ap.add_argument("--segment", type=int, default=250_000, help="index.segment_max_chunks of the built index")
    ap.add_argument("--corpus", choices=["realistic", "copies"], default="realistic",
                    help="the built index's rows: bench/scale_corpus.py or bench/scale_data.py")
    ap.add_argument("--data", help="the dev corpora the realistic corpus re-samples (default ../shared/data)")
    ap.add_argument("--index", help="search this index's live version instead of building one")
    ap.add_argument("--max-segments", type=int, help="search only the version's first N segments")
    ap.add_argument("--questions", type=int, default=500)
    ap.add_argument("--questions-file", help="JSONL questions (`question`) instead of the scale bench's")
    ap.add_argument("--batch", type=int, default=64, help="questions per search call (output.batch_size)")
    ap.add_argument("--threads", type=int, default=1, help="retrieve.search_threads of this tree's searchers "
                    "(1: CPU split by phase)")
    ap.add_argument("--baseline", default="main", help="git ref whose segment_search.py is timed too ('' for none)")
    ap.add_argument("--profile", action="store_true", help="cProfile each path (stderr)")
    ap.add_argument("--no-answer", dest="answer", action="store_false", help="skip timing the answer step")
    ap.add_argument("--out", help="add the result to this JSON list (replacing a run of the same shape)")
    ap.add_argument("--ann", default="", help="comma-separated HNSW efSearch values: search the index built "
                    "with index.ann hnsw (<dir>-hnsw) and time retrieve.mode ann at each against exact, with "
                    "recall@10 of the dense and the fused lists (e.g. 32,64,128)")
    ap.add_argument("--build-only", action="store_true")
    a = ap.parse_args(argv)
    if a.build_only:
        print(a.index or make_index(a.chunks, a.segment, a.corpus, a.data, ann=bool(a.ann)))
        return 0
    r = run(a)
    print(json.dumps(r, indent=1))
    same, _, total = str(r.get("same_rankings", "0/0")).partition("/")
    if same != total:
        print("search_bench: the paths rank some questions differently", file=sys.stderr)
        return 1
    if a.out:  # a list of runs: this one replaces an earlier run of the same shape
        from bench.jsonfile import write_json
        with open(a.out, encoding="utf-8") if os.path.exists(a.out) else io.StringIO("[]") as f:
            rows = json.load(f)
        r.pop("index")
        r.update(commit=_commit(), measured=time.strftime("%Y-%m-%d"))
        shape = ("corpus", "chunks", "segments", "questions", "threads", "blas_threads", "ann_ef_search")
        write_json(a.out, [x for x in rows if any(x.get(k) != r.get(k) for k in shape)] + [r])
    return 0


if __name__ == "__main__":
    sys.exit(main())
