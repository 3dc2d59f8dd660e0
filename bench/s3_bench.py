"""Index and answer jobs with the index on the local S3 server (SeaweedFS) against the same on a
local disk, and the answer job's peak RSS as the question file grows 1x -> 10x.

    python -m bench.s3_bench [--docs 40] [--questions 40]     (make bench-s3)

Each job runs as its own process (`python -m pipelines.cli`), so peak RSS is that process's
own (VmHWM of the child's address space). Results: bench/results/s3.md and s3.json.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.jsonfile import write_json

ROOT = Path(__file__).resolve().parent.parent


def _job(args: list[str], env: dict) -> tuple[float, float]:
    """(wall s, peak RSS MB) of one CLI job in a fresh process."""
    t0 = time.perf_counter()
    # a wrapper process per job, measuring itself: RUSAGE_CHILDREN's max is over all children,
    # and the child's own ru_maxrss starts at the parent's RSS (bench.job.peak_rss_mb: VmHWM)
    code = ("import runpy, sys; sys.argv = ['ragbeam'] + sys.argv[1:]\n"
            "from bench.job import peak_rss_mb\n"
            "try:\n    runpy.run_module('pipelines.cli', run_name='__main__')\n"
            "except SystemExit as e:\n    rc = e.code\nelse:\n    rc = 0\n"
            "print('PEAK_RSS_MB', peak_rss_mb(), file=sys.stderr)\n"
            "sys.exit(rc or 0)\n")
    run = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if run.returncode != 0:
        raise RuntimeError(f"{args}: rc {run.returncode}\n{run.stderr[-3000:]}")
    peak = [float(line.split()[1]) for line in run.stderr.splitlines() if line.startswith("PEAK_RSS_MB")]
    return wall, (peak[-1] if peak else float("nan"))


SECTION = "6. Index and answers on object storage"


def measure(n_docs: int, n_questions: int) -> dict:
    """Start SeaweedFS, run the index and answer jobs on S3 and on a local disk; the figures."""
    sys.path.insert(0, str(ROOT))
    from infra.s3 import seaweed

    a = argparse.Namespace(docs=n_docs, questions=n_questions)
    work = Path(tempfile.mkdtemp(prefix="ragbeam-s3-bench-"))
    server = seaweed.start(work / "s3", access_key="bench", secret_key="bench-secret", volume_max=20,
                           die_with_parent=True)
    try:
        env = {**os.environ, "PYTHONPATH": str(ROOT), **server.env(),
               "RAGBEAM__S3__ENDPOINT_URL": server.endpoint_url, "RAGBEAM__S3__REGION": server.region,
               "RAGBEAM__S3__ACCESS_KEY_ID": "bench", "RAGBEAM__S3__SECRET_ACCESS_KEY": "bench-secret",
               "RAGBEAM_INDEX_CACHE_DIR": str(work / "index-cache")}
        c = server.client()
        c.create_bucket(Bucket="bench")
        docs = sorted(p for p in (ROOT / "samples" / "corpus").rglob("*") if p.is_file())[:a.docs]
        src = work / "docs"
        for p in docs:
            rel = p.relative_to(ROOT / "samples" / "corpus")
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(p, src / rel)
            c.upload_file(str(p), "bench", f"docs/{rel}")
        qs = [json.loads(x) for x in (ROOT / "samples" / "questions.jsonl").read_text().splitlines() if x.strip()]
        figures = {}
        local_index, s3_index = str(work / "index"), "s3://bench/index"
        figures["index_local_s"], _ = _job(["index", "--quiet", "--input", "s3://bench/docs", "--output",
                                            local_index], env)
        figures["index_s3_s"], _ = _job(["index", "--quiet", "--input", "s3://bench/docs", "--output",
                                         s3_index], env)

        def qfile(n: int) -> str:
            path = work / f"q{n}.jsonl"
            path.write_text("".join(json.dumps({"id": f"q{i}", "question": qs[i % len(qs)]["question"]}) + "\n"
                                    for i in range(n)))
            c.upload_file(str(path), "bench", f"q/q{n}.jsonl")
            return str(path)
        q1 = qfile(a.questions)
        figures["answer_local_s"], _ = _job(["answer", "--quiet", "--index", local_index, "--questions", q1,
                                             "--output", str(work / "a-local.jsonl")], env)
        figures["answer_s3_s"], figures["answer_s3_rss_1x_mb"] = _job(
            ["answer", "--quiet", "--index", s3_index, "--questions", f"s3://bench/q/q{a.questions}.jsonl",
             "--output", "s3://bench/answers/a1.jsonl"], env)
        qfile(a.questions * 10)
        figures["answer_s3_10x_s"], figures["answer_s3_rss_10x_mb"] = _job(
            ["answer", "--quiet", "--index", s3_index, "--questions", f"s3://bench/q/q{a.questions * 10}.jsonl",
             "--output", "s3://bench/answers/a10.jsonl"], env)
    finally:
        server.stop(graceful=False)
        shutil.rmtree(work, ignore_errors=True)
    figures["docs"] = len(docs)
    return figures


def bench_s3(n_docs: int, n_questions: int, report) -> None:
    """`make bench` section 6: the same jobs with the index on S3 and on a local disk."""
    from bench.table import Figure
    f = measure(n_docs, n_questions)
    report.add(Figure(SECTION, f"index job wall, index on S3 ({f['docs']} docs)", f["index_s3_s"], "s",
                      f["index_local_s"], "the same job, index on a local disk"))
    report.add(Figure(SECTION, f"answer job wall ({n_questions} q), index + output on S3", f["answer_s3_s"], "s",
                      f["answer_local_s"], "the same job, index and output on a local disk"))
    report.add(Figure(SECTION, f"answer job peak RSS, {n_questions * 10} questions (10x)", f["answer_s3_rss_10x_mb"],
                      "MB", f["answer_s3_rss_1x_mb"], f"the same job with {n_questions} questions (1x)"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=40)
    ap.add_argument("--questions", type=int, default=40)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    a = ap.parse_args(argv)
    figures = measure(a.docs, a.questions)
    f = figures
    rows = [
        ("index job wall, index on S3 vs local disk", f"{f['index_s3_s']:.1f} s", f"{f['index_local_s']:.1f} s",
         f"{f['index_s3_s'] / f['index_local_s']:.2f}x"),
        (f"answer job wall ({a.questions} q), index + output on S3 vs local disk", f"{f['answer_s3_s']:.1f} s",
         f"{f['answer_local_s']:.1f} s", f"{f['answer_s3_s'] / f['answer_local_s']:.2f}x"),
        (f"answer job peak RSS, 10x questions ({a.questions * 10}) vs 1x ({a.questions})",
         f"{f['answer_s3_rss_10x_mb']:.0f} MB", f"{f['answer_s3_rss_1x_mb']:.0f} MB",
         f"{f['answer_s3_rss_10x_mb'] / f['answer_s3_rss_1x_mb']:.2f}x"),
    ]
    md = ["| figure | value | baseline | ratio |", "|---|---:|---:|---:|"] + [f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} |"
                                                                          for r in rows]
    os.makedirs(a.out, exist_ok=True)
    Path(a.out, "s3.md").write_text("\n".join(md) + "\n")
    write_json(Path(a.out, "s3.json"), {**figures, "questions": a.questions})
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
