"""`make bench`: python -m bench.run [--quick] [--out bench/results] [--data DIR] [--config FILE]

Every figure is measured in this run, on this data, beside a baseline measured
the same way. Writes <out>/bench.json and <out>/bench.md, then checks the figures the docs
report from that file (bench/expected/*.yaml, as `make bench-check` does): exit 1 on a drift.
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

from bench.data import ROOT, load_dataset
from bench.table import Report

# Full sizes keep ~5.5k embedded texts in all (~20/s on 2 cores): ~1.4k chunks twice
# (pipeline + bare loop), ~1.7k over the memory runs, and the reranker's re-embedding
# of candidate text for 32 + 3x8 answered questions (it is the costly part of answering).
# OCR (section 5) costs ~5 s CPU per 10-line page at 300 dpi (~20 s for a dense A4 page):
# 100 docs of which 10 scans, each OCR'd twice (alone, then inside the index job).
SIZES = {
    "full": dict(index_docs=1000, questions=256, batch=128, answer_questions=256,
                 mem_base=60, mem_factors=(1, 4, 16), mem_questions=8, ocr_docs=100, ocr_lines=10,
                 s3_docs=40, s3_questions=40, answer_mem_docs=60, answer_mem_counts=(1000, 10000, 100000),
                 scale=dict(sizes=(20_000, 80_000), segment=20_000, questions=100), llm_questions=16),
    "quick": dict(index_docs=40, questions=32, batch=16, answer_questions=8,
                  mem_base=4, mem_factors=(1, 4, 16), mem_questions=4, ocr_docs=20, ocr_lines=8,
                  s3_docs=8, s3_questions=8, answer_mem_docs=4, answer_mem_counts=(100, 1000),
                  scale=dict(sizes=(2_000, 8_000), segment=2_000, questions=20), llm_questions=4),
}


def _versions() -> dict:
    out = {"python": platform.python_version()}
    for mod in ("apache_beam", "onnxruntime", "duckdb", "numpy", "bm25s"):
        try:
            out[mod] = __import__(mod).__version__
        except Exception:
            pass
    try:
        out["git"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                    text=True).stdout.strip()
    except OSError:
        pass
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run, numbers not representative")
    ap.add_argument("--out", help="results folder (default bench/results, or bench/results/quick with --quick)")
    ap.add_argument("--data", help="folder holding cranfield/ (default ../shared/data; else a generated corpus)")
    ap.add_argument("--config", help="ragbeam config (default configs/default.yaml)")
    ap.add_argument("--only", default="1,2,4,5,6,7,8,9", help="sections to run, e.g. 1,2,4 (2 and 9 need 1; "
                    "section 3, HNSW, was removed with the DuckDB HNSW index)")
    ap.add_argument("--keep", action="store_true", help="keep the work folder")
    a = ap.parse_args(argv)

    from configs.schema import load_config
    from bench.index_bench import bench_index
    from bench.answer_memory_bench import bench_answer_memory
    from bench.memory_bench import bench_memory
    from bench.ocr_bench import bench_ocr
    from bench.retrieval_bench import bench_retrieval
    from bench.s3_bench import bench_s3

    mode = "quick" if a.quick else "full"
    size = SIZES[mode]
    out_dir = a.out or os.path.join(ROOT, "bench", "results", *(["quick"] if a.quick else []))
    only = {s.strip() for s in a.only.split(",")}
    cfg = load_config(a.config)
    need_docs = max(size["index_docs"], size["mem_base"] * max(size["mem_factors"]), size["ocr_docs"])
    data = load_dataset(a.data, generated_docs=need_docs)
    questions = data.questions[:size["questions"]]
    load_start = os.getloadavg()[0]
    started = time.monotonic()
    print(f"ragbeam bench ({mode}): {data.name} corpus ({len(data.docs)} docs available, "
          f"{len(questions)} questions), {os.cpu_count()} CPUs, load average {load_start:.2f}")

    report = Report()
    work = tempfile.mkdtemp(prefix="ragbeam-bench-")
    try:
        if only & {"1", "2", "9"}:
            index = bench_index(cfg, data, size["index_docs"], work, report)
            if "2" in only:
                bench_retrieval(cfg, index, questions, size["answer_questions"], size["batch"], work, report)
            if "9" in only:
                from bench.llm_bench import bench_llm
                bench_llm(cfg, index, [q["question"] for q in questions[:size["llm_questions"]]], work, report)
        if "4" in only:
            bench_memory(a.config, data, size["mem_base"], size["mem_factors"], size["mem_questions"], work, report)
        if "5" in only:
            bench_ocr(cfg, data, size["ocr_docs"], size["ocr_lines"], work, report)
        if "6" in only:
            bench_s3(size["s3_docs"], size["s3_questions"], report)
        if "7" in only:
            bench_answer_memory(a.config, data, size["answer_mem_docs"], size["answer_mem_counts"], work, report)
        if "8" in only:
            from bench.scale_bench import bench_scale_short
            bench_scale_short(report, **size["scale"])
    finally:
        if a.keep:
            print(f"work folder kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)

    elapsed = time.monotonic() - started
    load_end = os.getloadavg()[0]
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    meta = {"mode": mode, "dataset": data.name, "sizes": {k: list(v) if isinstance(v, tuple) else v
                                                          for k, v in size.items()},
            "cpus": os.cpu_count(), "machine": platform.machine(), "date": date,
            "load_avg_start": round(load_start, 2), "load_avg_end": round(load_end, 2),
            "elapsed_s": round(elapsed, 1), "versions": _versions()}
    meta["headline"] = (f"ragbeam bench, {mode} mode: {data.name} corpus, {os.cpu_count()} CPUs "
                        f"({platform.machine()}), {date}, {elapsed / 60:.1f} min, load average "
                        f"{load_start:.1f} at start" + (" — smoke sizes, not representative"
                                                        if a.quick else ""))
    jp, mp = report.write(out_dir, meta)
    print(f"\nbench finished in {elapsed:.0f} s; wrote {os.path.relpath(jp, ROOT)} and {os.path.relpath(mp, ROOT)}")
    return _check(jp)


def _check(results: str) -> int:
    """bench-check on the figures read from the file just written: a line per drift, exit 1."""
    from bench.check import check_results
    problems = check_results(results)
    for line in problems:
        print(line)
    print(f"bench-check: {len(problems)} problems among the expected figures read from "
          f"{os.path.relpath(results, ROOT)}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
