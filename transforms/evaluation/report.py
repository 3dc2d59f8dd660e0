"""The eval report: per-stage means, triage, answer figures; JSON, JSONL, HTML and a text table."""
from __future__ import annotations

import json
import os

import numpy as np

from transforms.evaluation import metrics as M
from transforms.evaluation.datasets import BM25_FLOORS
from transforms.evaluation.metrics import METRICS, RECALL_KS, STAGES

def _stage_means(recs: list[dict]) -> dict:
    return {s: {m: M.mean(r["metrics"][s][m] for r in recs) for m in METRICS} for s in STAGES}


def summarize(per_q, ds, cfg, version_dir, version, labels, timings, with_answers) -> dict:
    floors = BM25_FLOORS.get(ds.name, {})
    report = {
        "dataset": ds.name, "index_version": version, "version_dir": version_dir,
        "doc_ids_are": "keys (paths under the input)" if labels.by_key else "doc_ids",
        "counts": {"queries_judged": len(ds.queries), "queries_evaluated": len(per_q),
                   "documents": len(labels.labels)},
        "stages": _stage_means(per_q),
        "recall_curve": {s: {str(k): M.mean(r["metrics"][s][f"recall@{k}"] for r in per_q) for k in RECALL_KS}
                         for s in STAGES},
        "bm25_floor_ndcg@10": floors,
        "config": _masked_config(cfg),  # same masking as the manifest (issue 12, item 18)
        "timings": {k: round(v, 2) for k, v in timings.items()},
    }
    groups = sorted({r["group"] for r in per_q if r["group"]})
    if len(groups) > 1:
        report["groups"] = {g: {"queries": sum(r["group"] == g for r in per_q),
                                "stages": _stage_means([r for r in per_q if r["group"] == g])} for g in groups}
    report["triage"] = {
        "retrieved@10 (final)": M.mean((r["first_relevant_rank"]["final"] or 999) <= 10 for r in per_q),
        "in_context": M.mean(r["in_context"] for r in per_q),
        "answered": M.mean(r["status"] == "answered" for r in per_q),
        "cited_relevant (of answered)": M.mean(bool(r["cited_relevant"]) for r in per_q if r["status"] == "answered"),
        "citation_precision": M.mean(r["citation_precision"] for r in per_q if r["citation_precision"] is not None),
    }
    report["answer_status"] = status_mix(per_q)
    if ds.answers:
        ans = [r for r in per_q if "gold_in_answer" in r]
        report["answers"] = {**answer_figures(ans), "threshold": cfg.evidence_threshold}
        report["calibration"] = calibration(ans)
        if len(groups) > 1:  # e.g. the tune and eval halves of a dev set
            report["answers_by_group"] = {g: group_answer_figures([r for r in ans if r["group"] == g])
                                          for g in groups if any(r["group"] == g for r in ans)}
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
            "at_configured_threshold": next((s for s in sweep if abs(s["threshold"] - cfg.evidence_threshold) < 1e-9),
                                            M.threshold_sweep(pos, neg, [cfg.evidence_threshold])[0]),
            "sweep": sweep,
            "evidence_quantiles": {"answerable": _quantiles(pos), "unanswerable": _quantiles(neg)},
        }
    return report


# --- answer-level figures (docs/evaluation.md, "Answer-level figures and calibration") -----------

RIGHT = ("right: the answer cites a gold page (a document in the qrels) and holds a gold phrase "
         "(answers.jsonl, case and whitespace aside; a SQuAD span is one); a question not answered is not right")
STATUSES = ("answered", "not_found", "unsupported", "error")
CALIBRATION_BANDS = 10


def status_mix(per_q: list[dict]) -> dict:
    """How many questions ended in each status (anything else counts as error), and their shares."""
    counts = dict.fromkeys(STATUSES, 0)
    for r in per_q:
        counts[r["status"] if r["status"] in counts else "error"] += 1
    return {"counts": counts, "shares": {k: (v / len(per_q) if per_q else float("nan")) for k, v in counts.items()}}


def answer_figures(ans: list[dict]) -> dict:
    """Per-question answer judgements (evaluator.question_record) as shares of the questions."""
    answered = [r for r in ans if r["status"] == "answered"]
    code = [r for r in ans if r.get("names_code") is not None]
    return {
        "questions": len(ans),
        "right": M.mean(r["right"] for r in ans),
        "right (of answered)": M.mean(r["right"] for r in answered),
        "right_page_cited": M.mean(r["right_page_cited"] for r in ans),
        "gold_span_in_answer": M.mean(r["gold_in_answer"] for r in ans),
        "gold_span_in_answer (of answered)": M.mean(r["gold_in_answer"] for r in answered),
        "names_code_questions": len(code),
        "names_code": M.mean(bool(r["names_code"]) for r in code),
        "not_found_on_answerable": M.mean(r["status"] == "not_found" for r in ans),
    }


def _scores(recs: list[dict]) -> tuple[list[float], int]:
    """Each record's confidence, its evidence_score where it has none; and how many fell back."""
    out, fell_back = [], 0
    for r in recs:
        c = r.get("confidence")
        if c is None:
            c, fell_back = r["evidence_score"], fell_back + 1
        out.append(min(1.0, max(0.0, float(c))))
    return out, fell_back


def calibration(ans: list[dict], n_bands: int = CALIBRATION_BANDS) -> dict:
    """Calibration of the answers' confidence against "right" (RIGHT), over the answered questions
    (the answers a reader sees): the reliability table, ECE, AUC, mean confidence vs share right.
    A record without a confidence (None, or an answerer that gives none) is scored by its
    evidence_score instead, and the report says so."""
    answered = [r for r in ans if r["status"] == "answered"]
    conf, fell_back = _scores(answered)
    right = [bool(r["right"]) for r in answered]
    all_conf, all_fell_back = _scores(ans)
    mean_conf, share_right = M.mean(conf), M.mean(right)
    out = {
        "score": ("confidence" if not all_fell_back else "evidence_score" if all_fell_back == len(ans)
                  else "confidence, evidence_score where a record has none"),
        "records_without_confidence": all_fell_back,
        "over": "answered questions",
        "right_definition": RIGHT,
        "questions": len(answered),
        "ece": M.expected_calibration_error(conf, right, n_bands),
        "auc_confidence_vs_right": M.auc_of(conf, right),
        "auc_confidence_vs_right (all questions)": M.auc_of(all_conf, [bool(r["right"]) for r in ans]),
        "mean_confidence (answered)": mean_conf,
        "share_right (answered)": share_right,
        "calibration_gap (answered)": mean_conf - share_right,
        "reliability": M.reliability_table(conf, right, n_bands),
    }
    if all_fell_back:
        out["fallback"] = (f"{all_fell_back} of {len(ans)} answer records carry no confidence (absent or None): "
                           f"their evidence_score stands in for it ({fell_back} of the {len(answered)} answered)")
    return out


def group_answer_figures(ans: list[dict]) -> dict:
    """answer_figures and calibration's scalar figures of one query group (a dev set's half)."""
    cal = calibration(ans)
    return {**answer_figures(ans), **{k: cal[k] for k in (
        "ece", "auc_confidence_vs_right", "mean_confidence (answered)", "share_right (answered)")}}


def _quantiles(xs) -> dict:
    if not xs:
        return {}
    q = np.quantile(np.asarray(xs, float), [0.1, 0.25, 0.5, 0.75, 0.9])
    return dict(zip(("p10", "p25", "p50", "p75", "p90"), (round(float(v), 4) for v in q)))


def write_outputs(report_dir: str, report: dict, per_q: list[dict]) -> None:
    from transforms.evaluation.report_html import render_html
    from transforms.common.storage import write_json
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
        if isinstance(v, int) and not isinstance(v, bool):
            return f"{v:6d}"
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
    lines.append("triage: " + ", ".join(f"{k} {f(v).strip()}" for k, v in report["triage"].items()))
    if "answer_status" in report:
        lines.append("status: " + ", ".join(f"{k} {v}" for k, v in report["answer_status"]["counts"].items()))
    if "answers" in report:
        lines.append("answers: " + ", ".join(f"{k} {f(v).strip()}" for k, v in report["answers"].items()))
    if "calibration" in report:
        c = report["calibration"]
        lines.append(f"calibration ({c['score']} over {c['questions']} answered; right = cites a gold page and "
                     f"holds a gold phrase): ECE {f(c['ece']).strip()}, AUC vs right {f(c['auc_confidence_vs_right']).strip()} "
                     f"(all questions {f(c['auc_confidence_vs_right (all questions)']).strip()}), mean confidence "
                     f"{f(c['mean_confidence (answered)']).strip()} vs share right {f(c['share_right (answered)']).strip()}")
        lines.append("  reliability: " + ", ".join(f"{b['band']} {b['count']}:{f(b['share_right']).strip()}"
                                                   for b in c["reliability"] if b["count"]) + " (count:share right)")
        if c.get("fallback"):
            lines.append(f"  {c['fallback']}")
    for g, gs in (report.get("answers_by_group") or {}).items():
        lines.append(f"  group {g} ({gs['questions']} questions): right {f(gs['right']).strip()}, right page cited "
                     f"{f(gs['right_page_cited']).strip()}, names code {f(gs['names_code']).strip()} of "
                     f"{gs['names_code_questions']}, ECE {f(gs['ece']).strip()}, AUC {f(gs['auc_confidence_vs_right']).strip()}")
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
    if "judge" in report:
        j = report["judge"]
        lines.append(f"judge ({j['model']}; {', '.join(j['prompt_versions'].values())}): faithfulness "
                     f"{f(j['faithfulness']).strip()}, answer relevance {f(j['answer_relevance']).strip()} over "
                     f"{j['answers_judged']} answers, {j['claims_judged']} claims, {j['unparsed_verdicts']} unparsed; "
                     f"controls right {f(j['controls']['right']).strip()} of {j['controls']['judged']}"
                     + ("" if j["reliable"] else " -- NOT RELIABLE: the judge fails its control claims"))
    lines.append("timings: " + ", ".join(f"{k} {v}" for k, v in report["timings"].items()))
    return "\n".join(lines)


def _masked_config(cfg) -> dict:
    from transforms.index.manifest import manifest_config
    return manifest_config(cfg)
