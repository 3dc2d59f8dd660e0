"""4. Peak RSS of the index and answer jobs as the corpus grows (1x, 4x, 16x), one process per job."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from bench.data import ROOT, Dataset, write_corpus, write_questions
from bench.table import Figure, Report

SECTION = "4. Peak memory (RSS) vs corpus size"


def run_job(args: list[str], timeout: float = 1200) -> dict:
    proc = subprocess.run([sys.executable, "-m", "bench.job", *args], cwd=str(ROOT), capture_output=True,
                          text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"bench.job {args[0]} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def bench_memory(config_path, data: Dataset, base_docs: int, factors: tuple[int, ...], n_questions: int,
                 work: str, report: Report) -> list[dict]:
    cfg_args = ["--config", str(config_path)] if config_path else []
    floor = run_job(["floor", *cfg_args])
    qfile = write_questions(data.questions[:n_questions], os.path.join(work, "questions-mem.jsonl"))
    runs = []
    for f in factors:
        n = base_docs * f
        corpus = write_corpus(data.take(n), os.path.join(work, f"corpus-mem-{f}x"))
        idx = os.path.join(work, f"index-mem-{f}x")
        ix = run_job(["index", *cfg_args, "--input", corpus, "--index", idx])
        an = run_job(["answer", *cfg_args, "--index", idx, "--questions", qfile,
                      "--output", os.path.join(work, f"answers-mem-{f}x.jsonl")])
        mb = os.path.getsize(os.path.join(corpus, "corpus.jsonl")) / 1e6
        runs.append({"factor": f, "docs": n, "corpus_mb": mb, "index": ix, "answer": an})

    report.add(Figure(SECTION, "floor: imports + model loaded, no job", floor["peak_rss_mb"], "MB"))
    first = runs[0]
    for job in ("index", "answer"):
        for r in runs:
            j = r[job]
            what = f"{r['docs']} docs, {r['index']['chunks']} chunks" + \
                   (f", {j['questions']} q" if job == "answer" else "")
            if r is first:
                base, label = floor["peak_rss_mb"], "floor"
            else:
                base, label = first[job]["peak_rss_mb"], f"{first['factor']}× run"
            report.add(Figure(SECTION, f"{job} job peak RSS, {r['factor']}× ({what})", j["peak_rss_mb"], "MB",
                              base, label, note=f"input {r['corpus_mb']:.2f} MB, "
                              f"{r['index']['chunks'] * 384 * 4 / 1e6:.1f} MB of vectors; job wall {j['wall_s']:.0f} s"))
        last = runs[-1]
        d_chunks = last["index"]["chunks"] - first["index"]["chunks"]
        if d_chunks > 0:
            slope = (last[job]["peak_rss_mb"] - first[job]["peak_rss_mb"]) / d_chunks * 1000
            report.add(Figure(SECTION, f"{job} job growth per 1,000 chunks ({first['factor']}×→{last['factor']}×)",
                              slope, "MB", note="straight line through the smallest and largest run; "
                              "fixed costs such as the onnxruntime arena dominate at small sizes"))
    # Why the answer job grows: onnxruntime's arena keeps the largest activations it has
    # seen, and attention grows with batch x seq^2: this figure shows what batch 32 would
    # cost against the batch of 8 that Embedder.encode and embed.batch_size use.
    longest = sorted(data.take(base_docs * max(factors)), key=lambda d: -len(d["text"]))[:64]
    tfile = write_corpus(longest, os.path.join(work, "corpus-longest"))
    enc = {b: run_job(["encode", *cfg_args, "--input", os.path.join(tfile, "corpus.jsonl"), "--batch", str(b)])
           for b in (32, 8)}
    report.add(Figure(SECTION, f"Embedder.encode peak RSS, {len(longest)} longest docs, batch 32", enc[32]["peak_rss_mb"],
                      "MB", enc[8]["peak_rss_mb"], "the same at batch 8 (embed.batch_size)",
                      note="why encode() and embed.batch_size default to 8"))
    return runs
