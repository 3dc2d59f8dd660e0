"""`ragbeam eval`: build (or reuse) an index of a dataset's corpus and score it.

The scoring itself lives in transforms/evaluation (the same code the index job's
gate runs); this module only composes it with the index job.
"""
from __future__ import annotations

import os
import time
from typing import Optional

import numpy as np

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


def run_eval(cfg: Config, dataset: Optional[str], report_dir: str, *, index: Optional[str] = None,
             max_queries: Optional[int] = None, questions: Optional[str] = None,
             qrels: Optional[str] = None, seed: int = 0, reindex: bool = False,
             unanswerable: bool = True, log=print) -> dict:
    t0 = time.monotonic()
    timings = {}
    ds = load_dataset(dataset, questions, qrels)
    os.makedirs(report_dir, exist_ok=True)
    version_dir, index_summary = ensure_index(cfg, ds, report_dir, index, reindex, log)
    timings["index_s"] = time.monotonic() - t0
    ids = sample_ids(ds.queries, max_queries, seed)
    log(f"ragbeam eval: {ds.name}: {len(ids)} of {len(ds.queries)} judged queries against {version_dir}")
    ev = Evaluator(version_dir, cfg)
    labels = DocLabels(version_dir, {d for q in ids for d in ds.qrels[q]})
    with_answers = bool(ds.answers) and unanswerable
    per_q, qvec_all, t_ret, t_unans = [], [], 0.0, 0.0
    try:
        for i in range(0, len(ids), BATCH):
            batch = ids[i:i + BATCH]
            texts = [ds.queries[q] for q in batch]
            t = time.monotonic()
            qvecs = ev.engine.embedder.encode_queries(texts)
            qvec_all.append(qvecs)
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
            log(f"  {len(per_q)}/{len(ids)} questions")
        t = time.monotonic()
        hnsw = ev.hnsw_recall(np.concatenate(qvec_all)[:300]) if qvec_all else None
        timings["hnsw_s"] = time.monotonic() - t
        version = ev.engine.version
    finally:
        ev.close()
    timings.update(retrieve_rerank_answer_s=t_ret, unanswerable_s=t_unans, total_s=time.monotonic() - t0)
    report = summarize(per_q, ds, cfg, version_dir, version, hnsw, labels, timings, with_answers)
    if index_summary:
        report["index_run"] = {k: index_summary.get(k) for k in ("version", "documents", "chunks", "wall_s")}
    write_outputs(report_dir, report, per_q)
    return report
