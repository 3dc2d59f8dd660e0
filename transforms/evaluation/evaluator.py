"""Scoring an index version on a dataset: the stages of the answer engine, per question.

Every stage is scored at DOCUMENT level (a chunk ranking becomes a document
ranking by first occurrence), because qrels judge documents. The first stages
(bm25, dense, hybrid) run deeper than the answer job (DEPTH chunks per retriever)
so recall@100 means something; the "final" stage is exactly the answer job's
output for the question (QAEngine.run, its retrieved_docs), so scoring an answer
file with any standard scorer gives the same figures.
"""
from __future__ import annotations

import re
from typing import Optional

import numpy as np

from configs.schema import Config
from transforms.evaluation import metrics as M
from transforms.evaluation.datasets import Dataset, DocLabels, load_dataset, query_group, sample_ids
from transforms.evaluation.metrics import METRICS, STAGES
from transforms.query.records import Question

DEPTH = 200  # chunks per retriever; documents have several chunks, so >100 docs need more
BATCH = 64


class Evaluator:
    """One index version opened through QAEngine (the same embedder, indexes and
    reranker/answerer the answer job uses), driven stage by stage."""

    def __init__(self, version_dir: str, cfg: Config, embedder=None):
        from transforms.ingest.embed import model_spec_from_config
        from transforms.query.engine import QAEngine

        self.cfg = cfg
        self.engine = QAEngine(version_dir, cfg, model_spec_from_config(cfg), embedder=embedder)
        self.doc_of_chunk = self.engine.doc_ids  # chunk_no -> doc_id over every segment
        self.public = self.engine.masks.get(None, None)

    def close(self) -> None:
        self.engine.close()

    def docs(self, chunk_nos) -> list:
        return M.dedupe_first(self.doc_of_chunk[int(c)] for c in chunk_nos if c >= 0)

    def run(self, texts: list[str], stages=STAGES, masks: Optional[np.ndarray] = None,
            qvecs: Optional[np.ndarray] = None) -> list[dict]:
        """Per question: the document ranking of each stage asked for. bm25/dense/hybrid come
        from the engine's first stage run DEPTH deep (so recall@100 means something); "final"
        is the answer job's own output (`QAEngine.run`, its `retrieved_docs`), with the record
        under "record": what `ragbeam answer` would write for this question."""
        e = self.engine
        allowed = self.public if masks is None else masks
        if qvecs is None:
            qvecs = e.query_vectors(texts)
        out: list[dict] = [{} for _ in texts]
        if set(stages) & {"bm25", "dense", "hybrid"}:
            for o, r in zip(out, e.search(texts, allowed, qvecs, dense_n=DEPTH, bm25_n=DEPTH)):
                o.update(bm25=self.docs(c for c, _ in r.bm25), dense=self.docs(c for c, _ in r.dense),
                         hybrid=self.docs(c for c, _ in r.fused))
        if "final" in stages:
            qs = [Question(str(i), t) for i, t in enumerate(texts)]
            for o, rec in zip(out, e.run(qs, self.cfg.output.retrieved_top_k, allowed=allowed, qvecs=qvecs)):
                o.update(final=[d["doc_id"] for d in rec.retrieved_docs], record=rec)
        return out


def gate_metric(version_dir: str, cfg: Config, gate_cfg, embedder=None) -> float:
    """Mean gate_cfg.metric of gate_cfg.stage on the golden set, for a (staged or
    published) version dir (its manifest.json and the segments it lists)."""
    ds = load_dataset(gate_cfg.dataset)
    ids = sample_ids(ds.queries, gate_cfg.max_questions)
    if not ids:
        raise ValueError(f"{gate_cfg.dataset}: no queries with relevant documents")
    fn = M.metric_fn(gate_cfg.metric)
    stage = "final" if gate_cfg.stage == "reranked" else gate_cfg.stage  # "reranked": the old name
    ev = Evaluator(version_dir, cfg, embedder=embedder)
    try:
        labels = DocLabels(version_dir, {d for q in ids for d in ds.qrels[q]})
        scores = []
        for i in range(0, len(ids), BATCH):
            batch = ids[i:i + BATCH]
            for qid, o in zip(batch, ev.run([ds.queries[q] for q in batch], stages=(stage,))):
                scores.append(fn(o[stage], labels.doc_qrels(ds.qrels[qid])))
    finally:
        ev.close()
    return float(M.mean(scores))


def unanswerable_masks(ev: Evaluator, labels: DocLabels, golds: list[set]) -> np.ndarray:
    """(b, n) masks hiding each question's gold documents and every document of the
    same group: a SQuAD paragraph id is <article>_<n>, and sibling paragraphs of the
    gold one often hold the answer too, so the whole article goes."""
    def group(label: str) -> str:
        m = re.fullmatch(r"(.+)_\d+", label)
        return m.group(1) if m else label
    doc_group = {d: {group(l) for l in ls} for d, ls in labels.labels.items()}
    chunk_groups = [doc_group.get(d, {d}) for d in ev.doc_of_chunk]
    out = np.empty((len(golds), len(chunk_groups)), bool)
    for j, gold in enumerate(golds):
        hide = {group(g) for g in gold}
        out[j] = ev.public & np.array([not (g & hide) for g in chunk_groups], bool)
    return out


def question_record(qid, text, o, u, ds: Dataset, labels: DocLabels, ev: Evaluator) -> dict:
    """The triage of one question: retrieved? in the answer's context? used (cited)?"""
    qrels = labels.doc_qrels(ds.qrels[qid])
    rel = M.relevant(qrels)
    rec = {"id": qid, "question": text, "group": query_group(qid),
           "relevant": sorted(M.relevant(ds.qrels[qid]))}
    ranks, per_stage = {}, {}
    for s in STAGES:
        ranks[s] = M.first_relevant_rank(o[s], qrels)
        per_stage[s] = {m: M.metric_fn(m)(o[s], qrels) for m in METRICS}
    res = o["record"]
    head = res.retrieved
    context = head[:ev.cfg.answer.top_chunks]
    cited = [c.get("doc_id") for c in res.citations]
    top = head[0] if head else None
    rec.update(first_relevant_rank=ranks, metrics=per_stage,
               in_context=any(c["doc_id"] in rel for c in context),
               answer=res.answer, status=res.status, evidence_score=round(float(res.evidence_score), 4),
               cited=[_label(labels, d) for d in M.dedupe_first(cited)],
               cited_relevant=any(d in rel for d in cited) if cited else None,
               citation_precision=M.citation_precision(cited, rel),
               top1_relevant=bool(top and top["doc_id"] in rel),
               top1_score=round(float(top["score"]), 4) if top else None,
               top_docs=[_label(labels, d) for d in o["final"][:5]])
    answered = res.status == "answered"
    rec["confidence"] = _confidence(res)  # None: the record has none (report.py falls back to evidence_score)
    rec["right_page_cited"] = answered and any(d in rel for d in cited)
    if ds.answers.get(qid):
        gold = ds.answers[qid]
        rec["gold_in_answer"] = M.contains_span(res.answer, gold) if answered else False
        # "right" (what the confidence is calibrated to, docs/evaluation.md): cites a gold page and
        # holds a gold phrase
        rec["right"] = rec["right_page_cited"] and rec["gold_in_answer"]
        code = [p for p in gold if M.looks_like_code(p)]
        rec["names_code"] = (M.contains_code_name(res.answer, code) if answered else False) if code else None
    if u is not None:
        ur = u["record"]
        rec["unanswerable"] = {"status": ur.status, "evidence_score": round(float(ur.evidence_score), 4),
                               "confidence": _confidence(ur),
                               "answer": ur.answer,
                               "gold_leaked": any(c["doc_id"] in rel for c in ur.retrieved)}
    return rec


def _confidence(res) -> Optional[float]:
    """The record's calibrated confidence; None when it has none (an answerer that gives none, or
    a record from before the field)."""
    c = getattr(res, "confidence", None)
    return round(float(c), 4) if c is not None and np.isfinite(c) else None


def _label(labels: DocLabels, doc_id: str) -> str:
    ls = labels.labels.get(doc_id)
    return sorted(ls)[0] if ls else doc_id
