"""`ragbeam eval`: retrieval and answer quality of an index on a BEIR-layout dataset,
and `gate_metric`, the number the index job's eval gate compares.

Every stage is scored at DOCUMENT level (a chunk ranking becomes a document
ranking by first occurrence), because qrels judge documents. Retrieval goes
deeper than the answer job (DEPTH chunks per retriever) so recall@100 means
something; the reranker reorders only the fused head it sees in production
(rerank.top_n) and the fused tail is kept behind it.
"""
from __future__ import annotations

import json
import os
import random
import re
import time
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from configs.schema import Config
from transforms import metrics as M

STAGES = ("bm25", "dense", "hybrid", "reranked")
RECALL_KS = (5, 10, 50, 100)
METRICS = ("ndcg@10",) + tuple(f"recall@{k}" for k in RECALL_KS) + ("mrr@10",)
DEPTH = 200  # chunks per retriever; documents have several chunks, so >100 docs need more
BATCH = 64

# bm25s (k1=0.9, b=0.4) nDCG@10 from /work/shared/data/README.md: a floor to beat.
BM25_FLOORS = {
    "cranfield": {"all": 0.341},
    "vaswani-npl": {"all": 0.445},
    "msmarco-trecdl19-subset": {"all": 0.620},
    "squad-dev-half": {"all": 0.869},  # measured on the full SQuAD dev set, 2x this corpus
    "debian-docs": {"man": 0.692, "py": 0.834, "git": 0.826},
}


# --- the dataset ---------------------------------------------------------------------

@dataclass
class Dataset:
    name: str
    queries: dict[str, str]  # only queries with at least one relevant document
    qrels: dict[str, dict[str, int]]
    answers: dict[str, list[str]] = field(default_factory=dict)
    corpus: Optional[str] = None  # corpus.jsonl or docs/, what gets indexed


def read_qrels(path: str) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f):
            parts = line.rstrip("\n").split("\t")
            if len(parts) < 3 or (n == 0 and parts[0] == "query-id"):
                continue
            out.setdefault(parts[0], {})[parts[1]] = int(float(parts[2]))
    return out


def read_queries(path: str) -> dict[str, str]:
    from transforms.qa import Question
    from transforms.questions import read_questions
    return {q.id: q.question for q in read_questions(path) if isinstance(q, Question)}


def read_answers(path: str) -> dict[str, list[str]]:
    out = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                rec = json.loads(line)
                out[str(rec["id"])] = [a for a in rec.get("answers", []) if a]
    return out


def load_dataset(path: Optional[str] = None, questions: Optional[str] = None,
                 qrels: Optional[str] = None) -> Dataset:
    """A BEIR dir (queries.jsonl, qrels/test.tsv, corpus.jsonl or docs/, answers.jsonl);
    questions/qrels files override the dir's."""
    if path is None and not (questions and qrels):
        raise ValueError("give a dataset dir, or both a questions file and a qrels file")
    qfile = questions or os.path.join(path, "queries.jsonl")
    rfile = qrels or os.path.join(path, "qrels", "test.tsv")
    rels = read_qrels(rfile)
    queries = {q: t for q, t in read_queries(qfile).items() if M.relevant(rels.get(q, {}))}
    corpus = answers = None
    if path:
        for cand in ("corpus.jsonl", "docs"):
            if os.path.exists(os.path.join(path, cand)):
                corpus = os.path.join(path, cand)
                break
        afile = os.path.join(path, "answers.jsonl")
        answers = read_answers(afile) if os.path.exists(afile) and not questions else None
    name = os.path.basename(os.path.normpath(path)) if path else os.path.basename(qfile)
    return Dataset(name, queries, {q: rels[q] for q in queries}, answers or {}, corpus)


def _natural(s: str):
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", s)]


def sample_ids(ids, n: Optional[int], seed: int = 0) -> list[str]:
    """Deterministic: all ids (naturally sorted), or a seeded sample of n of them."""
    ids = sorted(ids, key=_natural)
    if n is None or n >= len(ids):
        return ids
    return sorted(random.Random(seed).sample(ids, n), key=_natural)


def query_group(qid: str) -> Optional[str]:
    m = re.match(r"([A-Za-z]+)-", qid)
    return m.group(1) if m else None


# --- documents: index doc ids <-> the dataset's corpus ids ------------------------------

class DocLabels:
    """Qrels name documents by doc_id (corpus.jsonl) or by path under the input
    (a folder corpus, where a doc's `key` is that path). Content-identical copies
    are one document in the index; every copy's path names it."""

    def __init__(self, version_dir: str, qrel_ids: set[str]):
        from transforms.shards import read_table
        t = read_table(version_dir, "documents", ["doc_id", "key", "source_uri", "source_uris"]).to_pylist()
        by_key: dict[str, str] = {}
        for r in t:
            root = r["source_uri"][:-len(r["key"])] if r["source_uri"].endswith(r["key"]) else None
            by_key[r["key"]] = r["doc_id"]
            for u in r["source_uris"] or []:
                if root and u.startswith(root):
                    by_key.setdefault(u[len(root):], r["doc_id"])
        doc_ids = {r["doc_id"] for r in t}
        self.by_key = len(qrel_ids & set(by_key)) > len(qrel_ids & doc_ids)
        self.doc_of = by_key if self.by_key else {d: d for d in doc_ids}
        self.labels: dict[str, list[str]] = {}
        for label, d in self.doc_of.items():
            self.labels.setdefault(d, []).append(label)

    def doc_qrels(self, qrels: dict[str, int]) -> dict:
        """Qrels in doc_id space. A judged document missing from the index stays in
        as a placeholder, so it still counts in the ideal ranking and in recall."""
        out: dict = {}
        for label, g in qrels.items():
            d = self.doc_of.get(label, ("missing", label))
            out[d] = max(out.get(d, g), g)
        return out


# --- retrieval and answering of one batch ------------------------------------------------

class Evaluator:
    """One index version opened through QAEngine (the same embedder, indexes and
    reranker/answerer the answer job uses), driven stage by stage."""

    def __init__(self, version_dir: str, cfg: Config, embedder=None):
        from transforms.embed import model_spec_from_config
        from transforms.qa import QAEngine

        self.cfg = cfg
        self.engine = QAEngine(version_dir, cfg, model_spec_from_config(cfg), embedder=embedder)
        con = self.engine.con
        self.doc_of_chunk = np.array(con.execute("SELECT doc_id FROM chunks ORDER BY chunk_no")
                                     .fetchnumpy()["doc_id"], dtype=object)
        self.public = self.engine.masks.get(None, None)

    def close(self) -> None:
        self.engine.close()

    def docs(self, chunk_nos) -> list:
        return M.dedupe_first(self.doc_of_chunk[int(c)] for c in chunk_nos if c >= 0)

    def run(self, texts: list[str], stages=STAGES, answer: bool = False,
            masks: Optional[np.ndarray] = None, qvecs: Optional[np.ndarray] = None) -> list[dict]:
        """Per question: chunk rankings per stage (chunk_nos), and with answer=True
        the reranked head (candidate dicts) and the answerer's result."""
        from transforms.fuse import rrf_fuse
        from transforms.retrieve import fetch_chunks

        e, rc = self.engine, self.cfg.retrieve
        allowed = self.public if masks is None else masks
        need = set(stages) | ({"reranked"} if answer else set())
        if qvecs is None:
            qvecs = e.embedder.encode(texts)
        if e.dense_mode == "exact":
            _, d_ids = e.dense.search(qvecs, DEPTH, allowed)
        else:  # what the answer job uses on this index size
            from transforms.retrieve import search_hnsw
            _, d_ids = search_hnsw(e.con, qvecs, DEPTH, allowed)
        _, b_ids = e.bm25.search(texts, DEPTH, allowed)
        out = []
        for j in range(len(texts)):
            dense = [int(i) for i in d_ids[j] if i >= 0]
            bm25 = [int(i) for i in b_ids[j] if i >= 0]
            fused = rrf_fuse({"dense": dense, "bm25": bm25}, k=rc.rrf_k,
                             weights={"dense": rc.dense_weight, "bm25": rc.bm25_weight})
            out.append({"bm25": bm25, "dense": dense, "hybrid": [c for c, _ in fused], "_fused": fused,
                        "_dense_rank": {c: r for r, c in enumerate(dense, 1)},
                        "_bm25_rank": {c: r for r, c in enumerate(bm25, 1)}})
        if "reranked" in need:
            head_n = self.cfg.rerank.top_n
            rows = fetch_chunks(e.con, sorted({c for o in out for c, _ in o["_fused"][:head_n]}))
            by_no = {r["chunk_no"]: r for r in rows}
            heads = []
            for o in out:
                cands = []
                for rank, (c, s) in enumerate(o["_fused"][:head_n], 1):
                    cand = dict(by_no[c])
                    cand.update(score=float(s), rank=rank, first_stage_score=float(s),
                                dense_rank=o["_dense_rank"].get(c), bm25_rank=o["_bm25_rank"].get(c))
                    cands.append(cand)
                heads.append(cands)
            reranked = e.reranker.rerank(texts, heads, cache=e.sentence_vectors)
            results = (e.answerer.answer(texts, reranked, cache=e.sentence_vectors) if answer
                       else [None] * len(texts))
            for o, head, res in zip(out, reranked, results):
                seen = {c["chunk_no"] for c in head}
                o["reranked"] = [c["chunk_no"] for c in head] + [c for c in o["hybrid"] if c not in seen]
                o["head"], o["result"] = head, res
        for o in out:
            for k in ("_fused", "_dense_rank", "_bm25_rank"):
                o.pop(k)
        return out

    def hnsw_recall(self, qvecs: np.ndarray, k: int = 10) -> Optional[float]:
        """HNSW top-k vs exact top-k over the questions (no filter on either side)."""
        from transforms.retrieve import search_hnsw
        if not len(qvecs) or not self.engine.meta.get("hnsw", True):
            return None
        _, exact = self.engine.dense.search(qvecs, k)
        _, approx = search_hnsw(self.engine.con, qvecs, k)
        return M.mean(len(set(a[a >= 0]) & set(x[x >= 0])) / k for x, a in zip(exact, approx))


# --- the gate ----------------------------------------------------------------------------

def gate_metric(version_dir: str, cfg: Config, gate_cfg, embedder=None) -> float:
    """Mean gate_cfg.metric of gate_cfg.stage on the golden set, for a (staged or
    published) version dir that has index.duckdb and manifest.json."""
    ds = load_dataset(gate_cfg.dataset)
    ids = sample_ids(ds.queries, gate_cfg.max_questions)
    if not ids:
        raise ValueError(f"{gate_cfg.dataset}: no queries with relevant documents")
    fn = M.metric_fn(gate_cfg.metric)
    ev = Evaluator(version_dir, cfg, embedder=embedder)
    try:
        labels = DocLabels(version_dir, {d for q in ids for d in ds.qrels[q]})
        scores = []
        for i in range(0, len(ids), BATCH):
            batch = ids[i:i + BATCH]
            for qid, o in zip(batch, ev.run([ds.queries[q] for q in batch], stages=(gate_cfg.stage,))):
                scores.append(fn(ev.docs(o[gate_cfg.stage]), labels.doc_qrels(ds.qrels[qid])))
    finally:
        ev.close()
    return float(M.mean(scores))


# --- the eval job ------------------------------------------------------------------------

def ensure_index(cfg: Config, ds: Dataset, report_dir: str, index: Optional[str], reindex: bool,
                 log=print) -> tuple[str, Optional[dict]]:
    """The version dir to evaluate: --index as given, else REPORT_DIR/index, built
    (or, with reindex, incrementally refreshed) from the dataset's corpus."""
    from transforms.publish import current_version, resolve_index
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
            qvecs = ev.engine.embedder.encode(texts)
            qvec_all.append(qvecs)
            runs = ev.run(texts, answer=True, qvecs=qvecs)
            t_ret += time.monotonic() - t
            unans = [None] * len(batch)
            if with_answers:
                t = time.monotonic()
                golds = [set(M.relevant(ds.qrels[q])) for q in batch]
                unans = ev.run(texts, stages=(), answer=True, qvecs=qvecs,
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


def question_record(qid, text, o, u, ds: Dataset, labels: DocLabels, ev: Evaluator) -> dict:
    """The triage of one question: retrieved? in the answer's context? used (cited)?"""
    qrels = labels.doc_qrels(ds.qrels[qid])
    rel = M.relevant(qrels)
    rec = {"id": qid, "question": text, "group": query_group(qid),
           "relevant": sorted(M.relevant(ds.qrels[qid]))}
    ranks, per_stage = {}, {}
    for s in STAGES:
        docs = ev.docs(o[s])
        ranks[s] = M.first_relevant_rank(docs, qrels)
        per_stage[s] = {m: M.metric_fn(m)(docs, qrels) for m in METRICS}
    head, res = o["head"], o["result"]
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
               top1_rerank_score=round(float(top.get("rerank_score", top["score"])), 4) if top else None,
               top_docs=[_label(labels, d) for d in M.dedupe_first(c["doc_id"] for c in head)][:5])
    if ds.answers.get(qid):
        rec["gold_in_answer"] = M.contains_span(res.answer, ds.answers[qid]) if res.status == "answered" else False
    if u is not None:
        ur = u["result"]
        rec["unanswerable"] = {"status": ur.status, "evidence_score": round(float(ur.evidence_score), 4),
                               "answer": ur.answer,
                               "gold_leaked": any(c["doc_id"] in rel for c in u["head"])}
    return rec


def _label(labels: DocLabels, doc_id: str) -> str:
    ls = labels.labels.get(doc_id)
    return sorted(ls)[0] if ls else doc_id


def _stage_means(recs: list[dict]) -> dict:
    return {s: {m: M.mean(r["metrics"][s][m] for r in recs) for m in METRICS} for s in STAGES}


def summarize(per_q, ds, cfg, version_dir, version, hnsw, labels, timings, with_answers) -> dict:
    floors = BM25_FLOORS.get(ds.name, {})
    report = {
        "dataset": ds.name, "index_version": version, "version_dir": version_dir,
        "doc_ids_are": "keys (paths under the input)" if labels.by_key else "doc_ids",
        "counts": {"queries_judged": len(ds.queries), "queries_evaluated": len(per_q),
                   "documents": len(labels.labels)},
        "stages": _stage_means(per_q),
        "recall_curve": {s: {str(k): M.mean(r["metrics"][s][f"recall@{k}"] for r in per_q) for k in RECALL_KS}
                         for s in STAGES},
        "hnsw_recall@10": hnsw, "bm25_floor_ndcg@10": floors,
        "config": cfg.model_dump(mode="json", exclude={"s3": True, "answer": {"api_key"}}),
        "timings": {k: round(v, 2) for k, v in timings.items()},
    }
    groups = sorted({r["group"] for r in per_q if r["group"]})
    if len(groups) > 1:
        report["groups"] = {g: {"queries": sum(r["group"] == g for r in per_q),
                                "stages": _stage_means([r for r in per_q if r["group"] == g])} for g in groups}
    report["triage"] = {
        "retrieved@100 (reranked)": M.mean((r["first_relevant_rank"]["reranked"] or 999) <= 100 for r in per_q),
        "in_context": M.mean(r["in_context"] for r in per_q),
        "answered": M.mean(r["status"] == "answered" for r in per_q),
        "cited_relevant (of answered)": M.mean(bool(r["cited_relevant"]) for r in per_q if r["status"] == "answered"),
        "citation_precision": M.mean(r["citation_precision"] for r in per_q if r["citation_precision"] is not None),
    }
    if ds.answers:
        ans = [r for r in per_q if "gold_in_answer" in r]
        report["answers"] = {
            "questions": len(ans),
            "gold_span_in_answer": M.mean(r["gold_in_answer"] for r in ans),
            "gold_span_in_answer (of answered)": M.mean(r["gold_in_answer"] for r in ans if r["status"] == "answered"),
            "not_found_on_answerable": M.mean(r["status"] == "not_found" for r in ans),
            "threshold": cfg.answer.threshold,
        }
    if with_answers:
        pos = [r["evidence_score"] for r in per_q]
        neg = [r["unanswerable"]["evidence_score"] for r in per_q]
        sweep = M.threshold_sweep(pos, neg)
        report["unanswerable"] = {
            "how": "each question asked again with its gold document and every other paragraph of the "
                   "same article hidden (a per-question filter mask on both retrievers), so the rest of "
                   "the corpus supplies same-domain distractors",
            "questions": len(neg),
            "answered (false answers)": M.mean(r["unanswerable"]["status"] == "answered" for r in per_q),
            "not_found": M.mean(r["unanswerable"]["status"] == "not_found" for r in per_q),
            "gold_leaked": M.mean(r["unanswerable"]["gold_leaked"] for r in per_q),
            "auc_answerable_vs_unanswerable": M.auc(pos, neg),
            "best_threshold": M.best_threshold(sweep),
            "at_configured_threshold": next((s for s in sweep if abs(s["threshold"] - cfg.answer.threshold) < 1e-9),
                                            M.threshold_sweep(pos, neg, [cfg.answer.threshold])[0]),
            "sweep": sweep,
            "evidence_quantiles": {"answerable": _quantiles(pos), "unanswerable": _quantiles(neg)},
        }
    return report


def _quantiles(xs) -> dict:
    if not xs:
        return {}
    q = np.quantile(np.asarray(xs, float), [0.1, 0.25, 0.5, 0.75, 0.9])
    return dict(zip(("p10", "p25", "p50", "p75", "p90"), (round(float(v), 4) for v in q)))


def write_outputs(report_dir: str, report: dict, per_q: list[dict]) -> None:
    from pipelines.report_html import render_html
    from transforms.publish import write_json
    write_json(os.path.join(report_dir, "report.json"), _finite(report))
    with open(os.path.join(report_dir, "per_question.jsonl"), "w", encoding="utf-8") as f:
        for r in per_q:
            f.write(json.dumps(_finite(r), ensure_ascii=False, default=str) + "\n")
    with open(os.path.join(report_dir, "report.html"), "w", encoding="utf-8") as f:
        f.write(render_html(report, per_q))


def _finite(x):
    """NaN (a mean of nothing) is not JSON: write null."""
    if isinstance(x, float):
        return x if np.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    return x


def format_table(report: dict) -> str:
    def f(v):
        return "   -  " if v is None or (isinstance(v, float) and not np.isfinite(v)) else f"{v:6.3f}"
    lines = [f"dataset {report['dataset']}  index {report['index_version']}  "
             f"{report['counts']['queries_evaluated']} queries",
             f"{'stage':10s} " + " ".join(f"{m:>10s}" for m in METRICS)]
    for s in STAGES:
        lines.append(f"{s:10s} " + " ".join(f"{f(report['stages'][s][m]):>10s}" for m in METRICS))
    for g, gs in (report.get("groups") or {}).items():
        lines.append(f"  group {g} ({gs['queries']} queries): " + ", ".join(
            f"{s} {f(gs['stages'][s]['ndcg@10']).strip()}" for s in STAGES) + " nDCG@10")
    if report["bm25_floor_ndcg@10"]:
        lines.append("BM25 floor nDCG@10 (bm25s, data README): " + ", ".join(
            f"{k} {v:.3f}" for k, v in report["bm25_floor_ndcg@10"].items()))
    if report.get("hnsw_recall@10") is not None:
        lines.append(f"HNSW recall@10 vs exact: {report['hnsw_recall@10']:.3f}")
    lines.append("triage: " + ", ".join(f"{k} {f(v).strip()}" for k, v in report["triage"].items()))
    if "answers" in report:
        lines.append("answers: " + ", ".join(f"{k} {f(v).strip()}" for k, v in report["answers"].items()))
    if "unanswerable" in report:
        u = report["unanswerable"]
        b, c = u["best_threshold"], u["at_configured_threshold"]
        lines.append(f"unanswerable: false answers {f(u['answered (false answers)']).strip()}, "
                     f"AUC {f(u['auc_answerable_vs_unanswerable']).strip()}; at threshold {c['threshold']:.2f}: "
                     f"answers {c['answered_answerable']:.3f} of answerable, refuses {c['refused_unanswerable']:.3f} "
                     f"of unanswerable; best threshold {b['threshold']:.2f} (balanced accuracy "
                     f"{b['balanced_accuracy']:.3f}: {b['answered_answerable']:.3f} / {b['refused_unanswerable']:.3f})")
        q = u["evidence_quantiles"]
        lines.append(f"evidence_score quantiles: answerable {q['answerable']}; unanswerable {q['unanswerable']}")
    lines.append("timings: " + ", ".join(f"{k} {v}" for k, v in report["timings"].items()))
    return "\n".join(lines)
