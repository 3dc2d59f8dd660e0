"""The index and answer jobs on the local Flink cluster (1 job manager, 2 task managers with 2
slots each) against the in-process runner on the same input, and where the cluster's time goes.

    make bench-flink        (= infra/flink/netns.sh .venv/bin/python -m bench.flink_bench)

Runs inside the private network namespace (the stack listens on every interface). Input: the
sample corpus and its 15 questions, local paths (one machine: the task managers see the same
disk). No speedup is expected on 2 cores: the point is what a cluster run costs on top.
Results: bench/results/flink.md and flink.json.
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from bench.jsonfile import write_json

ROOT = Path(__file__).resolve().parent.parent


def quiet(*_):
    pass


def flink_job_times(stack, before: set[str]) -> dict:
    """The job this run submitted: its duration in Flink and its slowest vertices."""
    jobs = [j for j in stack.jobs() if j["jid"] not in before]
    if not jobs:
        return {}
    job = max(jobs, key=lambda j: j["start-time"])
    detail = stack.rest(f"/jobs/{job['jid']}")
    vertices = sorted(detail["vertices"], key=lambda v: -v["duration"])[:4]
    return {"state": job["state"], "tasks": job["tasks"]["total"], "flink_s": job["duration"] / 1000,
            "slowest": [(v["name"][:70], v["duration"] / 1000) for v in vertices]}


def timed(fn, *args, **kwargs):
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - t0


def main(argv=None) -> int:
    from configs.schema import load_config
    from infra.flink import local
    from pipelines.answer import run_answer
    from pipelines.index import run_index

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", default=str(ROOT / "samples" / "corpus"))
    ap.add_argument("--questions", default=str(ROOT / "samples" / "questions.jsonl"))
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = ap.parse_args(argv)

    base = load_config(environ={})
    work = Path(tempfile.mkdtemp(prefix="ragbeam-flink-bench-"))
    results: dict = {}
    direct = {}
    s, direct["index_s"] = timed(run_index, base, args.corpus, str(work / "direct"), progress=False, log=quiet)
    direct["index_pipeline_s"] = s["pipeline_s"]
    _, direct["answer_s"] = timed(run_answer, base, str(work / "direct"), args.questions, str(work / "a-direct.jsonl"),
                                  progress=False, log=quiet)
    _, direct["rerun_s"] = timed(run_index, base, args.corpus, str(work / "direct"), progress=False, log=quiet)
    results["direct"] = direct

    stack, start_s = timed(local.start, work / "stack")
    try:
        cfg = base.model_copy(update={"runner": base.runner.model_copy(update={
            "name": "PortableRunner", "options": stack.runner_options()})})
        fl = {"stack_start_s": start_s}
        before = {j["jid"] for j in stack.jobs()}
        s, fl["index_s"] = timed(run_index, cfg, args.corpus, str(work / "flink"), progress=False, log=quiet)
        fl["index_pipeline_s"] = s["pipeline_s"]
        fl["index_job"] = flink_job_times(stack, before)
        before = {j["jid"] for j in stack.jobs()}
        _, fl["answer_s"] = timed(run_answer, cfg, str(work / "flink"), args.questions, str(work / "a-flink.jsonl"),
                                  progress=False, log=quiet)
        fl["answer_job"] = flink_job_times(stack, before)
        before = {j["jid"] for j in stack.jobs()}
        _, fl["rerun_s"] = timed(run_index, cfg, args.corpus, str(work / "flink"), progress=False, log=quiet)
        fl["rerun_job"] = flink_job_times(stack, before)
        results["flink"] = fl
    finally:
        stack.stop()

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "flink.json", results)
    d = results["direct"]
    lines = ["| job (sample corpus, 28 files; 15 questions) | in-process runner | Flink, 2 task managers | ratio |",
             "|---|---|---|---|"]
    for key, label in (("index_s", "index job, first run"), ("answer_s", "answer job"),
                       ("rerun_s", "index job, unchanged rerun")):
        lines.append(f"| {label} | {d[key]:.1f} s | {fl[key]:.1f} s | {fl[key] / d[key]:.2f}x |")
    lines += ["", f"Stack start-up (job manager, 2 task managers, job server): {fl['stack_start_s']:.1f} s.", ""]
    for key, label in (("index_job", "index job"), ("answer_job", "answer job"), ("rerun_job", "unchanged rerun")):
        j = fl.get(key) or {}
        if j:
            total = fl[key.replace("_job", "_s")]
            lines.append(f"- {label}: {j['tasks']} tasks {j['state']}; the job ran {j['flink_s']:.1f} s in Flink "
                         f"of {total:.1f} s wall; slowest vertices: "
                         + "; ".join(f"{n} {t:.1f} s" for n, t in j["slowest"]))
    (out / "flink.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
