"""7. The answer job's peak RSS as the question file grows (1k -> 10k -> 100k), one index.

Each run is its own process (bench.job answer) against the same small index, so the only thing
that grows is the question file and the output. The answer stage writes each batch of answers
as it goes (transforms/query/shard_writer.py) and the join and the final count follow one shard,
so the peak should stay flat: the target is <= 1.1x the 1k run at 100k.
"""
from __future__ import annotations

import json
import os

from bench.data import Dataset, write_corpus
from bench.memory_bench import run_job
from bench.table import Figure, Report

SECTION = "7. Answer job peak memory (RSS) vs question count"


def write_many_questions(questions: list[dict], n: int, path: str) -> str:
    """n distinct questions cycled from the dataset's, each with a fresh id (and, past the first
    pass, a suffix so no two lines are the same text)."""
    with open(path, "w", encoding="utf-8") as f:
        for i in range(n):
            q = questions[i % len(questions)]
            text = q["question"] if i < len(questions) else f"{q['question']} ({i // len(questions)})"
            f.write(json.dumps({"id": f"m{i}", "question": text}, ensure_ascii=False) + "\n")
    return path


def bench_answer_memory(config_path, data: Dataset, docs: int, counts: tuple[int, ...], work: str,
                        report: Report) -> list[dict]:
    cfg_args = ["--config", str(config_path)] if config_path else []
    corpus = write_corpus(data.take(docs), os.path.join(work, "corpus-answer-mem"))
    idx = os.path.join(work, "index-answer-mem")
    ix = run_job(["index", *cfg_args, "--input", corpus, "--index", idx])
    runs = []
    for n in counts:
        qfile = write_many_questions(data.questions, n, os.path.join(work, f"questions-{n}.jsonl"))
        out = os.path.join(work, f"answers-mem-{n}.jsonl")
        an = run_job(["answer", *cfg_args, "--index", idx, "--questions", qfile, "--output", out],
                     timeout=6 * 3600)
        an["output_mb"] = os.path.getsize(out) / 1e6
        runs.append({"questions": n, "answer": an})
        os.remove(out)  # a 100k-answer output is ~1 GB: keep the disk for the next run
    first = runs[0]
    for r in runs:
        a = r["answer"]
        base = None if r is first else first["answer"]["peak_rss_mb"]
        report.add(Figure(SECTION, f"answer job peak RSS, {r['questions']:,} questions", a["peak_rss_mb"], "MB",
                          base, f"the {first['questions']:,}-question run" if base else "",
                          note=f"{ix['chunks']} chunks; output {a['output_mb']:.0f} MB; "
                               f"{r['questions'] / a['wall_s']:.1f} q/s, wall {a['wall_s']:.0f} s"))
    return runs
