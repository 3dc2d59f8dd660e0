"""`ragbeam eval`: build (or reuse) an index of a dataset's corpus and score it.

The scoring itself lives in transforms/evaluation (the same code the index job's
gate runs); this module only composes it with the index job.
"""
from __future__ import annotations

import os
import time
from typing import Optional

from configs.schema import Config
from transforms.evaluation import metrics as M
from transforms.evaluation.datasets import Dataset, DocLabels, load_dataset, sample_ids
from transforms.evaluation.evaluator import BATCH, Evaluator, question_record, unanswerable_masks
from transforms.evaluation.report import format_table, summarize, write_outputs  # noqa: F401 (CLI)


def ensure_index(cfg: Config, ds: Dataset, report_dir: str, index: Optional[str], reindex: bool,
                 log=print) -> tuple[str, Optional[dict]]:
    """The version dir to evaluate: --index as given, else REPORT_DIR/index, built
    (or, with reindex, incrementally refreshed) from the dataset's corpus."""
    from transforms.index.publish import current_version, resolve_index
    if index:
        return resolve_index(index), None
    index_dir = os.path.join(report_dir, "index")
    if current_version(index_dir) and not reindex:
        log(f"ragbeam eval: reusing {index_dir} (--reindex to refresh it)")
        return resolve_index(index_dir), None
    if not ds.corpus:
        raise FileNotFoundError("no corpus.jsonl or docs/ in the dataset and no --index given")
    from pipelines.index import run_index
    summary = run_index(cfg, ds.corpus, index_dir, progress=False, log=log)
    return resolve_index(index_dir), summary


def judge_per_question(cfg: Config, ev: Evaluator, per_q: list[dict], records: list, log) -> dict:
    """The llm judge over the first judge.max_questions answered questions: each one's verdicts
    go into its per-question record, the means into the report (transforms/evaluation/judge.py)."""
    from transforms.common.chat import llm_client
    from transforms.evaluation.judge import Judge, judge_report
    picked = [(rec, rq) for rec, rq in zip(per_q, records) if rq.status == "answered"][:cfg.judge.max_questions]
    ids = sorted({c["chunk_id"] for _, rq in picked for c in rq.citations})
    text_of = ev.engine.chunk_texts(ids)
    items = [(rq.question, rq.answer, {c["n"]: text_of.get(c["chunk_id"], "") for c in rq.citations})
             for _, rq in picked]
    log(f"ragbeam eval: judging {len(items)} answers with {cfg.llm.model}")
    judged = Judge(llm_client(cfg.llm, max_tokens=4), cfg.llm.concurrency).judge(items)
    for (rec, _), j in zip(picked, judged):
        rec["judge"] = {"faithfulness": j.faithfulness, "relevant": j.relevant, "claims": j.claims}
    return judge_report(judged, cfg.llm.model)


def run_eval(cfg: Config, dataset: Optional[str], report_dir: str, *, index: Optional[str] = None,
             max_queries: Optional[int] = None, questions: Optional[str] = None,
             qrels: Optional[str] = None, seed: int = 0, reindex: bool = False,
             unanswerable: bool = True, log=print) -> dict:
    t0 = time.monotonic()
    timings = {}
    ds = load_dataset(dataset, questions, qrels)
    os.makedirs(report_dir, exist_ok=True)
    version_dir, index_summary = ensure_index(cfg, ds, report_dir, index, reindex, log)
    from transforms.index.publish import pin_current
    version_dir, lease = pin_current(version_dir)  # a nightly's pruning leaves the version being read
    try:
        return _evaluate(cfg, ds, report_dir, version_dir, index_summary, max_queries, seed, unanswerable,
                         log, t0, timings)
    finally:
        if lease is not None:
            lease.release()


def _evaluate(cfg: Config, ds: Dataset, report_dir: str, version_dir: str, index_summary: Optional[dict],
              max_queries: Optional[int], seed: int, unanswerable: bool, log, t0: float, timings: dict) -> dict:
    """run_eval on a pinned version."""
    timings["index_s"] = time.monotonic() - t0
    ids = sample_ids(ds.queries, max_queries, seed)
    log(f"ragbeam eval: {ds.name}: {len(ids)} of {len(ds.queries)} judged queries against {version_dir}")
    ev = Evaluator(version_dir, cfg)
    labels = DocLabels(version_dir, {d for q in ids for d in ds.qrels[q]})
    with_answers = bool(ds.answers) and unanswerable
    per_q, records, t_ret, t_unans = [], [], 0.0, 0.0
    try:
        for i in range(0, len(ids), BATCH):
            batch = ids[i:i + BATCH]
            texts = [ds.queries[q] for q in batch]
            t = time.monotonic()
            qvecs = ev.engine.query_vectors(texts)
            runs = ev.run(texts, qvecs=qvecs)
            t_ret += time.monotonic() - t
            unans = [None] * len(batch)
            if with_answers:
                t = time.monotonic()
                golds = [set(M.relevant(ds.qrels[q])) for q in batch]
                unans = ev.run(texts, stages=("final",), qvecs=qvecs,
                               masks=unanswerable_masks(ev, labels, golds))
                t_unans += time.monotonic() - t
            for qid, text, o, u in zip(batch, texts, runs, unans):
                per_q.append(question_record(qid, text, o, u, ds, labels, ev))
                records.append(o["record"])
            log(f"  {len(per_q)}/{len(ids)} questions")
        version = ev.engine.version
        judged = None
        if cfg.judge is not None:
            t = time.monotonic()
            judged = judge_per_question(cfg, ev, per_q, records, log)
            timings["judge_s"] = time.monotonic() - t
    finally:
        ev.close()
    timings.update(retrieve_rerank_answer_s=t_ret, unanswerable_s=t_unans, total_s=time.monotonic() - t0)
    report = summarize(per_q, ds, cfg, version_dir, version, labels, timings, with_answers)
    if judged is not None:
        report["judge"] = judged
    if index_summary:
        report["index_run"] = {k: index_summary.get(k) for k in ("version", "documents", "chunks", "wall_s")}
    write_outputs(report_dir, report, per_q)
    return report
