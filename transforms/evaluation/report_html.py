"""The eval report as one self-contained HTML page: inline SVG and CSS, no script,
no external resource, so it opens from file:// anywhere (and in a CI artifact viewer)."""
from __future__ import annotations

import html
import json
import math
from typing import Optional

COLORS = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#b07aa1"]
W, H, PAD_L, PAD_B, PAD_T, PAD_R = 540, 300, 48, 40, 28, 12

CSS = """body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:1200px}
h1{font-size:20px}h2{font-size:16px;margin-top:28px}table{border-collapse:collapse;margin:8px 0}
td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}th{background:#f3f3f3}
td.l,th.l{text-align:left}.charts{display:flex;flex-wrap:wrap;gap:16px}
figure{margin:0;border:1px solid #ddd;padding:6px}figcaption{font-size:12px;color:#555}
.small{font-size:12px;color:#555}svg text{font:11px system-ui,sans-serif}"""


def esc(x) -> str:
    return html.escape(str(x), quote=True)


def fmt(v, nd: int = 3) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "–"
    if isinstance(v, bool):
        return "yes" if v else "no"
    return f"{v:.{nd}f}" if isinstance(v, float) else esc(v)


def _frame(title: str, body: list[str], y_max: float, y_label: str = "") -> str:
    """Axes, horizontal grid lines and a y scale from 0 to y_max."""
    ih = H - PAD_T - PAD_B
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" role="img">',
           f"<title>{esc(title)}</title>"]
    for i in range(6):
        v = y_max * i / 5
        y = PAD_T + ih - ih * i / 5
        out.append(f'<line x1="{PAD_L}" x2="{W - PAD_R}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e5e5e5"/>'
                   f'<text x="{PAD_L - 4}" y="{y + 4:.1f}" text-anchor="end">{v:.2g}</text>')
    if y_label:
        out.append(f'<text x="12" y="{PAD_T - 10}">{esc(y_label)}</text>')
    out += body
    out.append(f'<line x1="{PAD_L}" x2="{PAD_L}" y1="{PAD_T}" y2="{H - PAD_B}" stroke="#888"/>'
               f'<line x1="{PAD_L}" x2="{W - PAD_R}" y1="{H - PAD_B}" y2="{H - PAD_B}" stroke="#888"/></svg>')
    return "".join(out)


def _y(v: float, y_max: float) -> float:
    ih = H - PAD_T - PAD_B
    return PAD_T + ih - ih * max(0.0, min(v, y_max)) / y_max


def _legend(names: list[str]) -> str:
    out, x = [], PAD_L + 8
    for i, n in enumerate(names):
        out.append(f'<rect x="{x}" y="6" width="10" height="10" fill="{COLORS[i % 6]}"/>'
                   f'<text x="{x + 14}" y="15">{esc(n)}</text>')
        x += 30 + 6 * len(n)  # ~6 px per character at 11 px
    return "".join(out)


def bar_chart(title: str, groups: list[str], series: dict[str, list[Optional[float]]],
              hline: Optional[tuple[str, float, int]] = None) -> str:
    """Grouped bars: one group per metric, one bar per series. hline: (label, value, group index)."""
    y_max = 1.0
    iw = W - PAD_L - PAD_R
    gw = iw / max(len(groups), 1)
    bw = gw * 0.8 / max(len(series), 1)
    body = [_legend(list(series))]
    for gi, g in enumerate(groups):
        x0 = PAD_L + gi * gw + gw * 0.1
        for si, (name, vals) in enumerate(series.items()):
            v = vals[gi]
            if v is None or not math.isfinite(v):
                continue
            y = _y(v, y_max)
            body.append(f'<rect x="{x0 + si * bw:.1f}" y="{y:.1f}" width="{bw - 1:.1f}" '
                        f'height="{H - PAD_B - y:.1f}" fill="{COLORS[si % 6]}"><title>{esc(name)} {esc(g)}: '
                        f'{v:.3f}</title></rect>')
        body.append(f'<text x="{PAD_L + gi * gw + gw / 2:.1f}" y="{H - PAD_B + 16}" text-anchor="middle">'
                    f'{esc(g)}</text>')
    if hline:
        label, v, gi = hline
        y = _y(v, y_max)
        x0, x1 = PAD_L + gi * gw, PAD_L + (gi + 1) * gw
        # the label goes top right, clear of the bars
        body.append(f'<line x1="{x0:.1f}" x2="{x1:.1f}" y1="{y:.1f}" y2="{y:.1f}" stroke="#000" '
                    f'stroke-dasharray="4 3"/><text x="{W - PAD_R}" y="15" text-anchor="end">'
                    f'- - {esc(label)} {v:.3f}</text>')
    return _frame(title, body, y_max)


def line_chart(title: str, xs: list, series: dict[str, list[Optional[float]]], y_max: float = 1.0,
               x_label: str = "", marks: Optional[dict[str, float]] = None) -> str:
    """Lines over evenly spaced x positions (labelled xs). marks: label -> x value (vertical lines)."""
    iw = W - PAD_L - PAD_R
    n = max(len(xs) - 1, 1)

    def xpos(i):
        return PAD_L + 10 + (iw - 20) * i / n
    body = [_legend(list(series))]
    step = max(1, len(xs) // 10)
    for i, x in enumerate(xs):
        if i % step == 0 or i == len(xs) - 1:
            body.append(f'<text x="{xpos(i):.1f}" y="{H - PAD_B + 16}" text-anchor="middle">{esc(x)}</text>')
    for si, (name, vals) in enumerate(series.items()):
        pts = [(xpos(i), _y(v, y_max)) for i, v in enumerate(vals) if v is not None and math.isfinite(v)]
        if not pts:
            continue
        body.append(f'<polyline fill="none" stroke="{COLORS[si % 6]}" stroke-width="2" points="'
                    + " ".join(f"{x:.1f},{y:.1f}" for x, y in pts) + '"/>')
        if len(pts) <= 12:
            body += [f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{COLORS[si % 6]}"/>' for x, y in pts]
    for label, xv in (marks or {}).items():
        if xs and isinstance(xs[0], (int, float)):
            i = min(range(len(xs)), key=lambda k: abs(xs[k] - xv))
            body.append(f'<line x1="{xpos(i):.1f}" x2="{xpos(i):.1f}" y1="{PAD_T}" y2="{H - PAD_B}" '
                        f'stroke="#000" stroke-dasharray="4 3"/><text x="{xpos(i) + 3:.1f}" y="{PAD_T + 12}">'
                        f'{esc(label)}</text>')
    if x_label:
        body.append(f'<text x="{W - PAD_R}" y="{H - 6}" text-anchor="end">{esc(x_label)}</text>')
    return _frame(title, body, y_max)


def histogram(title: str, series: dict[str, list[float]], bins: int = 30,
              marks: Optional[dict[str, float]] = None) -> str:
    """Overlaid histograms (share of each series per bin) on a common range."""
    vals = [v for vs in series.values() for v in vs if v is not None and math.isfinite(v)]
    if not vals:
        return "<p class='small'>no data</p>"
    lo, hi = min(vals + list((marks or {}).values())), max(vals + list((marks or {}).values()))
    if hi <= lo:
        hi = lo + 1e-6
    width = (hi - lo) / bins
    shares = {}
    for name, vs in series.items():
        counts = [0] * bins
        for v in vs:
            counts[min(int((v - lo) / width), bins - 1)] += 1
        shares[name] = [c / max(len(vs), 1) for c in counts]
    y_max = max(max(s) for s in shares.values()) * 1.1 or 1.0
    iw = W - PAD_L - PAD_R
    bw = iw / bins
    body = [_legend([f"{n} (n={len(series[n])})" for n in series])]
    for si, (name, s) in enumerate(shares.items()):
        for b, v in enumerate(s):
            if v:
                y = _y(v, y_max)
                body.append(f'<rect x="{PAD_L + b * bw:.1f}" y="{y:.1f}" width="{bw:.1f}" height="{H - PAD_B - y:.1f}" '
                            f'fill="{COLORS[si % 6]}" fill-opacity="0.5"><title>{esc(name)} '
                            f'[{lo + b * width:.3f}, {lo + (b + 1) * width:.3f}): {v:.3f}</title></rect>')
    for t in range(6):
        xv = lo + (hi - lo) * t / 5
        body.append(f'<text x="{PAD_L + iw * t / 5:.1f}" y="{H - PAD_B + 16}" text-anchor="middle">{xv:.2f}</text>')
    for i, (label, xv) in enumerate((marks or {}).items()):
        x = PAD_L + iw * (xv - lo) / (hi - lo)
        body.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{PAD_T}" y2="{H - PAD_B}" stroke="#000" '
                    f'stroke-dasharray="4 3"/><text x="{x + 3:.1f}" y="{PAD_T + 12 + 12 * i}">{esc(label)}</text>')
    return _frame(title, body, y_max, "share")


def table(header: list[str], rows: list[list]) -> str:
    out = ["<table><tr>" + "".join(f'<th class="{"l" if i == 0 else ""}">{esc(h)}</th>'
                                   for i, h in enumerate(header)) + "</tr>"]
    for r in rows:
        out.append("<tr>" + "".join(f'<td class="{"l" if i == 0 or isinstance(v, str) else ""}">{fmt(v)}</td>'
                                    for i, v in enumerate(r)) + "</tr>")
    return "".join(out) + "</table>"


def fig(svg: str, caption: str) -> str:
    return f"<figure>{svg}<figcaption>{esc(caption)}</figcaption></figure>"


def render_html(report: dict, per_q: list[dict]) -> str:
    from transforms.evaluation.metrics import METRICS, RECALL_KS, STAGES
    st = report["stages"]
    floors = report.get("bm25_floor_ndcg@10") or {}
    parts = [f"<h1>ragbeam eval — {esc(report['dataset'])}</h1>",
             f"<p class='small'>index version {esc(report['index_version'])}; "
             f"{report['counts']['queries_evaluated']} of {report['counts']['queries_judged']} judged queries; "
             f"documents matched by {esc(report['doc_ids_are'])}</p>",
             "<h2>Retrieval (document level)</h2>",
             table(["stage"] + list(METRICS), [[s] + [st[s][m] for m in METRICS] for s in STAGES])]
    if floors:
        parts.append("<p>BM25 floor nDCG@10 (bm25s, data README): " +
                     ", ".join(f"{esc(k)} {v:.3f}" for k, v in floors.items()) + "</p>")
    if report.get("groups"):
        rows = [[g, gs["queries"]] + [gs["stages"][s]["ndcg@10"] for s in STAGES] + [floors.get(g)]
                for g, gs in report["groups"].items()]
        parts += ["<h2>nDCG@10 per query group</h2>",
                  table(["group", "queries"] + list(STAGES) + ["BM25 floor"], rows)]
    charts = [fig(bar_chart("metrics per stage", list(METRICS), {s: [st[s][m] for m in METRICS] for s in STAGES},
                            ("BM25 floor", floors["all"], 0) if "all" in floors else None),
                  "Each metric per stage (dashed: the published BM25 floor for nDCG@10)."),
              fig(line_chart("recall@k", list(RECALL_KS),
                             {s: [report["recall_curve"][s][str(k)] for k in RECALL_KS] for s in STAGES},
                             x_label="k (documents)"), "Recall@k per stage.")]
    if "unanswerable" in report:
        u = report["unanswerable"]
        best = u["best_threshold"]["threshold"]
        conf = report.get("answers", {}).get("threshold", u["at_configured_threshold"]["threshold"])
        charts.append(fig(histogram("evidence_score", {
            "answerable": [r["evidence_score"] for r in per_q],
            "unanswerable": [r["unanswerable"]["evidence_score"] for r in per_q]},
            marks={f"configured {conf:.2f}": conf, f"best {best:.2f}": best}),
            "Extractive evidence_score: the same questions with and without their article in the index."))
        sw = u["sweep"]
        charts.append(fig(line_chart("threshold sweep", [r["threshold"] for r in sw], {
            "answers answerable": [r["answered_answerable"] for r in sw],
            "refuses unanswerable": [r["refused_unanswerable"] for r in sw],
            "balanced accuracy": [r["balanced_accuracy"] for r in sw]}, x_label="answer.threshold",
            marks={"best": best}), "What answer.threshold trades: answered answerable vs refused unanswerable."))
    else:
        charts.append(fig(histogram("evidence_score", {
            "answered": [r["evidence_score"] for r in per_q if r["status"] == "answered"],
            "not found": [r["evidence_score"] for r in per_q if r["status"] == "not_found"]}),
            "Extractive evidence_score by answer status."))
    charts.append(fig(histogram("top-1 rerank score", {
        "top-1 relevant": [r["top1_score"] for r in per_q if r["top1_relevant"] and r["top1_score"] is not None],
        "top-1 not relevant": [r["top1_score"] for r in per_q if not r["top1_relevant"]
                               and r["top1_score"] is not None]}),
        "Reranker score of the top candidate, split by whether its document is relevant."))
    parts += ["<div class='charts'>"] + charts + ["</div>"]
    parts += ["<h2>Triage</h2>", table(["measure", "value"], [[k, v] for k, v in report["triage"].items()])]
    if "answer_status" in report:
        mix = report["answer_status"]
        parts += ["<h2>Answer status</h2>", table(["status", "questions", "share"],
                                                  [[k, v, mix["shares"][k]] for k, v in mix["counts"].items()])]
    if "answers" in report:
        parts += ["<h2>Answers</h2>", table(["measure", "value"], [[k, v] for k, v in report["answers"].items()])]
    if "calibration" in report:
        parts += answer_calibration_section(report, per_q)
    if "unanswerable" in report:
        u = report["unanswerable"]
        rows = [[k, v] for k, v in u.items() if k not in ("sweep", "evidence_quantiles", "best_threshold",
                                                        "at_configured_threshold", "how")]
        rows += [[f"best threshold: {k}", v] for k, v in u["best_threshold"].items()]
        rows += [[f"at configured threshold: {k}", v] for k, v in u["at_configured_threshold"].items()]
        parts += ["<h2>Unanswerable questions</h2>", f"<p>{esc(u['how'])}</p>", table(["measure", "value"], rows),
                  table(["evidence_score", "p10", "p25", "p50", "p75", "p90"],
                        [[k] + list(v.values()) for k, v in u["evidence_quantiles"].items()])]
    misses = [r for r in per_q if not r["in_context"]][:40]
    parts += [f"<h2>Questions whose relevant document missed the answer context ({sum(not r['in_context'] for r in per_q)})</h2>",
              table(["id", "question", "bm25", "dense", "hybrid", "final", "status"],
                    [[r["id"], r["question"][:120]] + [_rank(r["first_relevant_rank"][s]) for s in STAGES] + [r["status"]]
                     for r in misses])]
    parts += ["<h2>Timings and config</h2>", table(["phase", "seconds"], [[k, v] for k, v in report["timings"].items()]),
              f"<details><summary>config</summary><pre>{esc(json.dumps(report['config'], indent=1))}</pre></details>"]
    return (f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>ragbeam eval "
            f"{esc(report['dataset'])}</title><style>{CSS}</style></head><body>" + "\n".join(parts) + "</body></html>\n")


def answer_calibration_section(report: dict, per_q: list[dict]) -> list[str]:
    """Answer-level figures and calibration: the definition of right, the reliability table and
    its diagram, the confidence of right vs wrong answers, and the figures per query group."""
    c = report["calibration"]
    rel = c["reliability"]
    out = ["<h2>Answer-level figures and calibration</h2>",
           f"<p>{esc(c['right_definition'])}. Calibration is of <b>{esc(c['score'])}</b> over the "
           f"{c['questions']} answered questions: among answers at confidence about c, about c should be right.</p>"]
    if c.get("fallback"):
        out.append(f"<p><b>Note:</b> {esc(c['fallback'])}.</p>")
    out.append(table(["measure", "value"], [[k, c[k]] for k in (
        "ece", "auc_confidence_vs_right", "auc_confidence_vs_right (all questions)", "mean_confidence (answered)",
        "share_right (answered)", "calibration_gap (answered)", "records_without_confidence")]))
    out.append(table(["confidence band", "answers", "mean confidence", "share right"],
                     [[b["band"], b["count"], b["mean_confidence"], b["share_right"]] for b in rel]))
    answered = [r for r in per_q if r["status"] == "answered" and "right" in r]

    def score(r):
        return r["evidence_score"] if r.get("confidence") is None else r["confidence"]
    charts = [fig(line_chart("reliability", [b["band"] for b in rel], {
        "share right": [b["share_right"] if b["count"] else None for b in rel],
        "mean confidence": [b["mean_confidence"] if b["count"] else None for b in rel],
        "perfect calibration": [(b["lo"] + b["hi"]) / 2 for b in rel]}, x_label="confidence band"),
        "Share of answers that are right per confidence band, against the band's mean confidence."),
        fig(histogram("confidence of answers", {
            "right": [score(r) for r in answered if r["right"]],
            "not right": [score(r) for r in answered if not r["right"]]}, bins=20),
            "The confidence of answered questions, split by whether the answer is right.")]
    out += ["<div class='charts'>"] + charts + ["</div>"]
    groups = report.get("answers_by_group") or {}
    if groups:
        cols = ["questions", "right", "right_page_cited", "gold_span_in_answer", "names_code", "names_code_questions",
                "ece", "auc_confidence_vs_right", "mean_confidence (answered)", "share_right (answered)"]
        out += ["<h2>Answer-level figures per query group</h2>",
                table(["group"] + cols, [[g] + [gs[k] for k in cols] for g, gs in groups.items()])]
    return out


def _rank(r) -> str:
    return "–" if r is None else str(r)
