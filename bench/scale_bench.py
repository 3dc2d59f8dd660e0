"""`make bench-scale`: segmented indexes at 100k..3M realistic synthetic chunks on this machine.

python -m bench.scale_bench [--sizes 250000,1000000] [--segment 250000] [--questions 500]
                            [--nightly 300000] [--data ../shared/data] [--out bench/results/scale.json]

The corpus (bench/scale_corpus.py, docs/benchmarks.md "The scale corpus"): documents re-sampled from
the real text of the dev corpora (samples/corpus when ../shared/data is missing), with a vocabulary
growing by Heaps' law fitted on that text and vectors from the real chunks' embeddings; the
questions are real dev-set questions whose gold documents are planted in it. The embedding model
runs for the questions (and once for the pool), not for the synthetic rows. Per size, each step in
its own process, so its peak RSS and CPU (wait4: user + system, every thread) are its own:
  build    the version's segments from its shards (pipelines.segments.rebuild_segments: the
           Beam segment pipeline on the in-process runner), from scratch
  answer   the answer job (pipelines.answer.run_answer: scatter/gather over the segments) on
           `--questions` questions; search CPU is the process CPU inside SegmentSearcher.search
  nightly  (sizes in --nightly) the WHOLE index job (pipelines.index.run_index, what `ragbeam
           index` runs) on the corpus written as JSONL source files (out/scale/src-<n>/): a full
           run into an empty index, then a nightly after the documents of ~1% of the files
           changed; the model's forward pass is taken out of both by a pre-filled embedding cache
           and measured apart (bench/scale_index_job.py)
Full-build rows: chunks, segments, build_cpu_s, search_cpu_ms_per_question, answer_peak_rss_mb,
distinct_terms (BM25 terms per segment, mean), recall_at_10, and the older figures; nightly rows:
nightly, chunks, nightly_cpu_s, full_cpu_s (process CPU of each whole job), nightly_bytes_written,
full_bytes_written (files each run created or changed in the index), their ratios,
change_fraction, the jobs' counts, model_cpu_ms_per_chunk and peak RSS. Written to --out (a list
of rows) with a table beside it (.md); raw outputs under out/scale/.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time

from bench.jsonfile import write_json

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORK = os.path.join(ROOT, "out", "scale")


def _cfg(segment: int):
    from configs.schema import load_config
    return load_config(environ={"RAGBEAM__INDEX__SEGMENT_MAX_CHUNKS": str(segment)})


def _pool(data: str | None):
    from pathlib import Path
    from bench.scale_pool import build_pool
    return build_pool(Path(data) if data else None)


def _make_index(n: int, pool, questions: int, seed: int = 0) -> tuple[str, dict]:
    """out/scale/idx-<n>/ holding one realistic synthetic version, and its gold map
    (out/scale/gold-<n>.json); made once, reused while the pool, seed, questions and generator
    are the same."""
    from bench.scale_corpus import GENERATOR, write_realistic_version
    from bench.scale_pool import pool_digest
    idx = os.path.join(WORK, f"idx-{n}")
    name = f"v{n}"
    vdir = os.path.join(idx, "versions", name)
    gold_path = os.path.join(WORK, f"gold-{n}.json")
    want = {"generator": GENERATOR, "pool_digest": pool_digest(pool), "seed": seed,
            "questions": len(pool.questions[:questions])}
    have = _read_json(os.path.join(vdir, "manifest.json")).get("synthetic") or {}
    if any(have.get(k) != v for k, v in want.items()) or not os.path.exists(gold_path):
        shutil.rmtree(idx, ignore_errors=True)
        got = write_realistic_version(pool, vdir, n, seed=seed, questions=questions,
                                      log=lambda *a: print(*a, file=sys.stderr, flush=True))
        with open(gold_path, "w", encoding="utf-8") as f:
            json.dump(got["gold"], f)
    with open(os.path.join(idx, "CURRENT"), "w", encoding="utf-8") as f:
        f.write(name + "\n")
    return idx, _read_json(gold_path)


def _read_json(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


BYTES_PER_CHUNK = 8_000  # measured: idx-1000000 (shards + segments) is 7.6 GB


def _disk_short(n: int) -> str:
    """Why a synthetic version of n chunks does not fit the disk ('' when it does or is made)."""
    if os.path.exists(os.path.join(WORK, f"idx-{n}", "versions", f"v{n}", "manifest.json")):
        return ""
    need, free = 1.2 * n * BYTES_PER_CHUNK, shutil.disk_usage(WORK).free
    return "" if free > need else f"needs ~{need / 1e9:.0f} GB, {free / 1e9:.0f} GB free"


def _bench_questions(path: str, pool, gold: dict, n: int) -> str:
    """The first n pool questions whose gold documents are planted in this version."""
    from bench.scale_corpus import questions_for
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(q) + "\n" for q in questions_for(pool, gold, n))
    return path


def _questions(path: str, n: int) -> str:
    """The old copy corpus's questions (the first sentences of the sample rows): kept for
    bench/studies/ann_vs_exact.py, which measures on the copy corpus's vectors."""
    from bench.scale_data import make_source_rows
    from transforms.common.sentences import split_sentences
    rows = make_source_rows().column("text").to_pylist()
    qs = []
    for i, t in enumerate(rows * (1 + n // max(1, len(rows)))):
        s = split_sentences(t or "")
        if s:
            qs.append({"id": f"q{len(qs)}", "question": s[0][:200]})
        if len(qs) == n:
            break
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(q) + "\n" for q in qs)
    return path


def _run_child(args: list[str], result: str) -> tuple[dict, float, float]:
    """(the child's result, its peak RSS in MB, its CPU seconds)."""
    from bench.scale_data import run_measured
    r = run_measured([sys.executable, "-m", "bench.scale_bench", *args, "--result", result], cwd=ROOT)
    if r["rc"] != 0:
        raise RuntimeError(f"{' '.join(args)}: exit {r['rc']}")
    with open(result, encoding="utf-8") as f:
        return json.load(f), r["peak_rss_mb"], r["cpu_s"]


def _segment_bytes(index: str, ids) -> int:
    from bench.scale_data import dir_bytes
    return sum(dir_bytes(os.path.join(index, "segments", i)) for i in ids)


# --- the child steps (each in its own process) -----------------------------------------------

def _child_build(a) -> dict:
    from pipelines.segments import rebuild_segments
    shutil.rmtree(os.path.join(a.index, "segments"), ignore_errors=True)
    got = rebuild_segments(_cfg(a.segment), a.index)
    from transforms.index.segments import read_meta
    segs = got["segments"]
    terms = [read_meta(os.path.join(a.index, "segments", s["id"]))["terms"] for s in segs]
    return {"segments": len(segs), "artifact_s": got["artifact_s"], "build_s": got["build_s"],
            "distinct_terms": round(sum(terms) / max(1, len(terms))),
            "segment_bytes": _segment_bytes(a.index, [s["id"] for s in segs])}


def _child_answer(a) -> dict:
    from bench.scale_corpus import recall_at
    from pipelines.answer import run_answer
    from transforms.query import segment_search
    out = os.path.join(WORK, f"answers-{os.path.basename(a.index)}.jsonl")
    for p in (out, out + ".summary.json"):
        if os.path.exists(p):
            os.remove(p)
    shutil.rmtree(out + ".parts", ignore_errors=True)
    # search CPU: the process's CPU inside every SegmentSearcher.search call (the in-process
    # runner answers one bundle at a time, so what runs meanwhile is the search and its BLAS threads)
    spent = [0.0]
    search = segment_search.SegmentSearcher.search

    def timed_search(self, *args, **kw):
        t0 = time.process_time()
        try:
            return search(self, *args, **kw)
        finally:
            spent[0] += time.process_time() - t0
    segment_search.SegmentSearcher.search = timed_search
    t = time.perf_counter()
    s = run_answer(_cfg(a.segment), a.index, a.questions, out, progress=False, log=lambda *_: None, overwrite=True)
    wall = time.perf_counter() - t
    n = s["questions_written"]
    recall, judged = recall_at(out, _read_json(a.gold), 10) if a.gold else (float("nan"), 0)
    return {"questions": n, "answer_wall_s": round(wall, 2), "answer_qps": round(n / wall, 2),
            # None when the runner searched in other processes (nothing was timed here)
            "search_cpu_ms_per_question": round(1000 * spent[0] / n, 2) if n and spent[0] else None,
            "recall_at_10": round(recall, 4) if judged else None, "recall_questions": judged}


def _nightly_row(n: int, pool, a, stamp: dict) -> dict:
    """A 1% nightly against a full run, both the whole index job (pipelines.index.run_index on
    real source files: listing, planning, reading, parsing, dedupe, chunking, contextualizing,
    embedding from a pre-filled cache, shards, segments, publishing), each in its own process
    (bench/scale_index_job.py)."""
    from bench.scale_index_job import BYTES_PER_CHUNK as JOB_BYTES, measure
    need, free = 1.2 * n * JOB_BYTES, shutil.disk_usage(WORK).free
    if free < need:  # said, not silently dropped
        return {"chunks": n, "nightly": True, "skipped": f"needs ~{need / 1e9:.0f} GB, {free / 1e9:.0f} GB free",
                **stamp}
    row = measure(n, pool, a.segment, _run_child, WORK, fraction=0.01, questions=int(a.questions),
                  log=lambda *x: print(*x, file=sys.stderr, flush=True))
    return {**row, **stamp}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.scale_bench", description=__doc__.splitlines()[0])
    ap.add_argument("step", nargs="?", choices=["build", "answer", "index", "model"], help=argparse.SUPPRESS)
    ap.add_argument("--sizes", default="250000,1000000", help="chunks, comma-separated")
    ap.add_argument("--segment", type=int, default=250_000)
    ap.add_argument("--questions", default="500")
    ap.add_argument("--nightly", default="250000", help="sizes that also get a 1%% nightly ('' for none)")
    ap.add_argument("--data", help="the dev corpora the corpus is re-sampled from (default ../shared/data; "
                    "samples/corpus when they are missing)")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "scale.json"))
    ap.add_argument("--merge", action="store_true", help="keep --out's rows of the sizes not run now "
                    "(each row says when and at which commit it was measured)")
    ap.add_argument("--index", help=argparse.SUPPRESS)
    ap.add_argument("--input", help=argparse.SUPPRESS)
    ap.add_argument("--gold", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.step:  # a child process
        from bench.scale_index_job import child_index, child_model
        got = {"build": _child_build, "answer": _child_answer, "index": child_index,
               "model": child_model}[a.step](a)
        with open(a.result, "w", encoding="utf-8") as f:
            json.dump(got, f)
        return 0
    os.makedirs(WORK, exist_ok=True)
    pool = _pool(a.data)
    n_questions = int(a.questions)
    nightly = {int(x) for x in a.nightly.split(",") if x}
    sizes = [int(x) for x in a.sizes.split(",")]
    rows, kept = [], _kept_rows(a.out, sizes) if a.merge else []
    stamp = {"measured": time.strftime("%Y-%m-%d", time.gmtime()), "commit": _commit(),
             "corpus": f"resampled from {pool.name} (Heaps K={pool.stats['K']}, beta={pool.stats['beta']})"}
    for n in sizes:
        short = _disk_short(n)
        if short:  # a size that does not fit is said, not silently dropped
            rows.append({"chunks": n, "skipped": short})
            print(json.dumps(rows[-1]), flush=True)
            continue
        idx, gold = _make_index(n, pool, n_questions)
        qfile = _bench_questions(os.path.join(WORK, f"questions-{n}.jsonl"), pool, gold, n_questions)
        gold_file = os.path.join(WORK, f"gold-{n}.json")
        res = os.path.join(WORK, "result.json")
        b, b_rss, b_cpu = _run_child(["build", "--index", idx, "--segment", str(a.segment)], res)
        q, q_rss, q_cpu = _run_child(["answer", "--index", idx, "--segment", str(a.segment), "--questions", qfile,
                                      "--gold", gold_file], res)
        row = {"chunks": n, "segments": b["segments"], "segment_max_chunks": a.segment,
               "build_cpu_s": round(b_cpu, 2), "distinct_terms": b["distinct_terms"],
               "search_cpu_ms_per_question": q["search_cpu_ms_per_question"],
               "answer_peak_rss_mb": round(q_rss), "build_peak_rss_mb": round(b_rss),
               "artifact_s": b["artifact_s"], "answer_cpu_s": round(q_cpu, 2), "answer_qps": q["answer_qps"],
               "questions": q["questions"], "recall_at_10": q["recall_at_10"], **stamp}
        rows.append(row)
        print(json.dumps(row), flush=True)
        if n in nightly:
            rows.append(_nightly_row(n, pool, a, stamp))
            print(json.dumps(rows[-1]), flush=True)
        _write(a.out, sorted(kept + rows, key=lambda r: (r["chunks"], bool(r.get("nightly")))))
    return 0


def _kept_rows(out: str, sizes: list[int]) -> list[dict]:
    try:
        with open(out, encoding="utf-8") as f:
            return [r for r in json.load(f) if r["chunks"] not in sizes]
    except (OSError, ValueError):
        return []


def _commit() -> str:
    import subprocess
    got = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return got.stdout.strip() or "unknown"


def _write(out: str, rows: list[dict]) -> None:
    os.makedirs(os.path.dirname(out), exist_ok=True)
    write_json(out, rows, depth=1)
    cols = ["chunks", "segments", "distinct_terms", "build_cpu_s", "build_peak_rss_mb", "artifact_s",
            "search_cpu_ms_per_question", "answer_peak_rss_mb", "answer_qps", "recall_at_10", "nightly_cpu_vs_full",
            "nightly_bytes_vs_full", "nightly_vs_full"] + (["skipped"] if any("skipped" in r for r in rows) else [])
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(str(r.get(c, "")) for c in cols) + " |" for r in rows]
    runs: dict[str, list[str]] = {}
    for r in rows:
        if "commit" in r:
            runs.setdefault(f"{r['measured']} at {r['commit']}", []).append(f"{r['chunks']:,}" + (" nightly" if r.get("nightly") else ""))
    notes = [f"Measured {k}: {', '.join(v)}." for k, v in runs.items()]
    with open(os.path.splitext(out)[0] + ".md", "w", encoding="utf-8") as f:
        f.write("Segmented index at scale (`make bench-scale`, python -m bench.scale_bench)\n\n"
                + "\n".join(lines) + "\n" + ("\n" + "\n".join(notes) + "\n" if len(runs) > 1 else ""))


if __name__ == "__main__":
    sys.exit(main())


SECTION = "8. Segments at scale (short)"


def bench_scale_short(report, sizes=(20_000, 80_000), segment: int = 20_000, questions: int = 100) -> list[dict]:
    """`make bench` section 8: the scale bench at small sizes (one segment, then four), each figure
    beside its one-segment baseline measured in the same run."""
    from bench.table import Figure
    out = os.path.join(WORK, "scale-short.json")
    main(["--sizes", ",".join(map(str, sizes)), "--segment", str(segment), "--questions", str(questions),
          "--nightly", str(sizes[-1]), "--out", out])
    with open(out, encoding="utf-8") as f:
        rows = json.load(f)
    full = [r for r in rows if not r.get("nightly")]
    one, many = full[0], full[-1]
    label = f"{one['chunks']:,} chunks in 1 segment"
    at = f"{many['chunks']:,} chunks in {many['segments']} segments"
    report.add(Figure(SECTION, f"answer job peak RSS, {at}", many["answer_peak_rss_mb"], "MB",
                      one["answer_peak_rss_mb"], label))
    report.add(Figure(SECTION, f"segment build peak RSS, {at}", many["build_peak_rss_mb"], "MB",
                      one["build_peak_rss_mb"], label))
    report.add(Figure(SECTION, f"answer q/s, {at}", many["answer_qps"], "q/s", one["answer_qps"], label))
    for r in rows:
        if r.get("nightly") and "skipped" not in r:
            report.add(Figure(SECTION, f"nightly index job CPU, 1% of {r['chunks']:,} changed", r["nightly_cpu_s"],
                              "s", r["full_cpu_s"], "full index job run of the same corpus"))
            report.add(Figure(SECTION, f"nightly artifact time, 1% of {r['chunks']:,} changed", r["nightly_artifact_s"],
                              "s", r["full_artifact_s"], "full segment build of the same version"))
    return rows
