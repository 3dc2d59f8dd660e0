"""Fit the answer selection (transforms/query/selection.py) on the tune halves of the dev sets.

    python -m bench.fit_answer_model [--sets squad,perlfaq,gitfaq] [--write]

Per dev set, every question is retrieved twice by the engine's own first stage: normally, and
with its gold pages hidden (as `ragbeam eval` makes a question unanswerable). Then, on the tune
halves only:
1. page model: logistic regression, "this page is a gold page", over the pages of the read list;
2. sentence model: logistic regression, "this sentence is on a gold page and holds a gold phrase"
   (SQuAD: an annotator's span; the FAQ sets: the API or page the FAQ's answer names);
3. confidence: logistic regression, "the composed answer is right" (it cites a gold page and holds
   a gold phrase), over the chosen page's and lead sentence's probabilities and retrieval scores,
   then isotonic calibration on out-of-fold predictions (normal and gold-hidden questions);
4. the composition (a further sentence's and a second page's share of the lead's probability) and
   the threshold: picked on tune, the most right answers minus wrong ones.
SQuAD counts as much as the documentation sets pooled (sample weights). The eval halves only report. --write stores the
model in transforms/query/answer_model.json; results go to bench/results/answer_model.json, with
the hand-weighted selection's figures on the same eval halves beside them (`rules_eval`;
--rules-only adds just those to an existing results file).
The dev sets' indexes come from `python -m bench.eval_all` (SQuAD) and `make devsets` + `ragbeam
eval` (the FAQ sets; bench/faq_devsets.py).
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from bench.jsonfile import write_json
from bench.data import ROOT
from transforms.evaluation import metrics as M
from transforms.query import selection as S

# name -> (index dir, dataset dir, how tune/eval ids are drawn)
DEV = {
    "squad": ("out/eval/squad/index", "{data}/squad-dev-half", "squad"),
    "perlfaq": ("out/eval/perlfaq/index", "out/devsets/perlfaq", "split"),
    "gitfaq": ("out/eval/gitfaq/index", "out/devsets/gitfaq", "split"),
    "sqlitefaq": ("out/eval/sqlitefaq/index", "out/devsets/sqlitefaq", "split"),
}
SQUAD_TUNE = 1500  # SQuAD tune questions drawn (seed 1): enough for a few dozen weights
RATIOS = (0.3, 0.5, 0.7)
SPLITS = (0.4, 0.55, 0.7, 0.85)
BUDGETS = (30, 40, 50)  # most words in an answer past its lead sentence's
THRESHOLDS = tuple(round(0.025 * i, 3) for i in range(1, 39))
MAX_WORDS = 37  # mean answer words on tune: 40 with room for the eval half's spread
HIDDEN_REFUSED = 0.90  # the threshold: the lowest that refuses this share of gold-hidden tune questions
UNANSWERABLE_SETS = ("squad",)  # whose gold-hidden questions the threshold must refuse


def split_ids(name: str, ds, kind: str, folder: str) -> tuple[list[str], list[str]]:
    """(tune, eval) query ids: SQuAD's 500 eval questions and SQUAD_TUNE others; a FAQ set's
    qrels/tune.tsv and qrels/eval.tsv (split by source page)."""
    from bench.studies.devsets import squad_samples
    if kind == "squad":
        ev, tune = squad_samples(ds, tune_size=SQUAD_TUNE)
        return tune, ev
    out = []
    for split in ("tune", "eval"):
        path = os.path.join(folder, "qrels", f"{split}.tsv")
        with open(path) as f:
            next(f)
            out.append(sorted({line.split("\t")[0] for line in f if line.strip()} & set(ds.queries)))
    return out[0], out[1]


def collect_set(name: str, index: str, folder: str, kind: str, cache_dir: str, cfg):
    """({"tune": [...], "eval": [...]} of bench.studies.answer_variants.collect rows, cached; the Evaluator)."""
    from bench.studies.answer_variants import cached_sets
    from bench.studies.segview import live_texts
    from transforms.evaluation.datasets import DocLabels, load_dataset
    from transforms.evaluation.evaluator import Evaluator
    from transforms.index.publish import resolve_index

    vdir = resolve_index(index)
    ev = Evaluator(vdir, cfg)
    ev.engine.answerer.set_idf(live_texts(ev.engine))
    ds = load_dataset(folder)
    tune, evl = split_ids(name, ds, kind, folder)
    labels = DocLabels(vdir, {d for q in tune + evl for d in ds.qrels[q]})
    pkl = os.path.join(cache_dir, f"{name}-{os.path.basename(vdir)}.pkl")
    return cached_sets(ev, ds, tune, evl, labels, pkl), ev


def blank_model() -> S.AnswerModel:
    return S.AnswerModel("unfitted", np.zeros(len(S.PAGE_FEATURES)), 0.0, np.zeros(len(S.SENTENCE_FEATURES)), 0.0,
                         np.zeros(len(S.CONFIDENCE_FEATURES)), 0.0, np.array([0.0, 1.0]), np.array([0.0, 1.0]),
                         0.0, {"sentence_ratio": 0.8, "split_ratio": 0.9}, {})


def score_all(answerer, model, qs, key="head"):
    """Per question: selection.Scored of its read list under `model` (the answerer's read_chunks)."""
    answerer.p.answer_model = model
    out = []
    for q in qs:
        cands = list(q[key][:answerer.p.read_chunks])
        out.append(answerer.fitted_scores(q["text"], np.asarray(q["qv"], np.float32), cands, None))
    return out


def right(answer: str, cited: list, q) -> bool:
    """Cites a gold page and holds a gold phrase (a question without phrases: a gold page cited)."""
    page = any(d in q["rel"] for d in cited)
    return page and (M.contains_span(answer, q["answers"]) if q["answers"] else True)


def fit_lr(x, y, w, c=1.0):
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler
    sc = StandardScaler().fit(x)
    lr = LogisticRegression(C=c, max_iter=2000).fit(sc.transform(x), y, sample_weight=w)
    coef = lr.coef_[0] / sc.scale_
    bias = float(lr.intercept_[0] - (sc.mean_ / sc.scale_) @ lr.coef_[0])
    return coef, bias


def weights_per_set(groups: dict) -> dict:
    """Sample weight per question: the documentation sets pooled (a question each) count as much
    as SQuAD (prose), so neither a tiny FAQ set nor SQuAD's thousands of questions dominate."""
    docs = sum(len(v) for k, v in groups.items() if k != "squad") or 1
    squad = len(groups.get("squad", [])) or 1
    return {k: (docs / squad if k == "squad" else 1.0) for k in groups}


def main(argv=None) -> None:
    from configs.schema import load_config
    ap = argparse.ArgumentParser()
    ap.add_argument("--sets", default="squad,perlfaq,gitfaq,sqlitefaq")
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    ap.add_argument("--cache", default="out/answer_model")
    ap.add_argument("--write", action="store_true", help="store the fitted model in transforms/query/answer_model.json")
    ap.add_argument("--results", default=str(ROOT / "bench/results/answer_model.json"))
    ap.add_argument("--report-only", action="store_true",
                    help="no fit: the shipped model's figures on both halves, reliability tables included")
    ap.add_argument("--rules-only", action="store_true",
                    help="fit only the rules answers' confidence into the shipped model (with --write) and add "
                         "the rules' figures on the eval halves to the results file")
    args = ap.parse_args(argv)
    os.makedirs(args.cache, exist_ok=True)
    if not args.report_only:
        bootstrap_model_file(args.write, whole_fit=not args.rules_only)
    # the engine is opened without a model (the fit sets its own on the answerer)
    os.environ["RAGBEAM__ANSWER__SELECTION"] = "rules"
    cfg = load_config(None)
    sets, answerers = {}, {}
    for name in args.sets.split(","):
        index, folder, kind = DEV[name]
        folder = folder.format(data=args.data)
        if not os.path.exists(index):
            raise SystemExit(f"{name}: no index at {index} (python -m bench.eval_all / make devsets)")
        sets[name], ev = collect_set(name, index, folder, kind, args.cache, cfg)
        answerers[name] = ev.engine.answerer
        answerers[name].rules_threshold = answerers[name].p.threshold  # the rules' evidence threshold
    if args.report_only:  # the shipped model's figures again (reliability tables included), no fit
        m = S.AnswerModel.load()
        report = json.loads(Path(args.results).read_text()) if os.path.exists(args.results) else {}
        for name, a in answerers.items():  # every question answered: summarize applies the threshold,
            a.p.answer_model, a.p.threshold = m, -1.0  # and the AUC judges the answers it refused too
        for split in ("tune", "eval"):
            rows = model_rows(sets, answerers, m, split)
            report[split] = summarize(rows, m)
            report[f"reliability_{split}"] = reliability(rows, m)
        report["eval_threshold_off"] = summarize(model_rows(sets, answerers, m, "eval"), replace(m, threshold=-1.0))
        report["rules_eval"] = rules_summary(sets, answerers, model=m)
        print(json.dumps({k: report[k] for k in ("eval", "reliability_eval")}, indent=1), flush=True)
        write_json(args.results, report)
        return
    if args.rules_only:  # the rules answers' confidence fitted into the shipped model, and reported
        m = S.AnswerModel.load()
        fit_rules_confidence(sets, answerers, m, weights_per_set({k: v["tune"] for k, v in sets.items()}))
        report = json.loads(Path(args.results).read_text())
        report["rules_eval"] = rules_summary(sets, answerers, model=m)
        report["rules_confidence_eval"] = rules_calibration_report(sets, answerers, m)
        report["model"] = to_dict(m)
        print(json.dumps(report["rules_confidence_eval"], indent=1), flush=True)
        write_json(args.results, report)
        if args.write:
            Path(S.MODEL_FILE).write_text(json.dumps(to_dict(m), indent=1) + "\n")
            print("wrote", S.MODEL_FILE)
        return
    wset = weights_per_set({k: v["tune"] for k, v in sets.items()})
    m = blank_model()

    # 1. pages
    X, Y, W = [], [], []
    for name, qs in sets.items():
        for q, sc in zip(qs["tune"], score_all(answerers[name], m, qs["tune"])):
            for d, x in zip(sc.docs, sc.page_x):
                X.append(x), Y.append(d in q["rel"]), W.append(wset[name] / max(1, len(sc.docs)))
    m.page_w, m.page_b = fit_lr(np.array(X), np.array(Y), np.array(W))
    print("page model:", dict(zip(S.PAGE_FEATURES, np.round(m.page_w, 3))), flush=True)

    # 2. sentences: a listwise (conditional logit) scorer over each question's answerable sentences,
    # its page's log probability always a column, further features added while they pay on tune
    groups = sentence_groups(sets, answerers, m, wset)
    cols, beta, tried_cols = select_sentence_model(groups)
    m.sent_kind, m.sent_b = "listwise", 0.0
    m.sent_w = np.zeros(len(S.SENTENCE_FEATURES))
    m.sent_w[cols] = beta[:-1]
    m.page_weight = float(beta[-1])
    print("sentence model:", {S.SENTENCE_FEATURES[c]: round(float(w), 3) for c, w in zip(cols, beta)},
          "page_weight", round(m.page_weight, 3), flush=True)

    # 3. compose + confidence: answer every tune question (threshold off), normal and gold hidden;
    # the candidates are scored once, each composition only re-composes
    scored: dict = {}

    def answer_rows(split, model, compose):
        rows = []
        for name, qs in sets.items():
            a = answerers[name]
            a.p.answer_model, a.p.threshold = model, -1.0
            for key in ("head", "uhead"):
                if (name, split, key) not in scored:
                    scored[(name, split, key)] = score_all(a, model, qs[split], key)
                for q, sc in zip(qs[split], scored[(name, split, key)]):
                    cands = list(q[key][:a.p.read_chunks])
                    rows.append({**answer_row(name, key, q, a.compose(sc, cands, compose)), "x": sc.conf_x})
        return rows

    best, tried = None, []
    for ratio, split, budget in itertools.product(RATIOS, SPLITS, BUDGETS):
        c = {"sentence_ratio": ratio, "split_ratio": split, "word_budget": budget}
        rows = [r for r in answer_rows("tune", m, c) if not r["hidden"]]
        score = sum(wset[r["set"]] * r["right"] for r in rows)
        words = float(np.average([r["words"] for r in rows], weights=[wset[r["set"]] for r in rows]))
        tried.append({**c, "right": round(score, 2), "words": round(words, 1)})
        # the most right answers among compositions that keep answers short (issue 11: <= 40 words)
        if words <= MAX_WORDS and (best is None or score > best[0]):
            best = (score, c)
    print("compositions tried:", tried, flush=True)
    compose = best[1]
    m.compose = compose
    print("composition:", compose, flush=True)
    rows = answer_rows("tune", m, compose)
    rows = [r for r in rows if r["x"] is not None]
    X = np.array([r["x"] for r in rows])
    Y = np.array([r["right"] for r in rows])
    W = np.array([wset[r["set"]] for r in rows])
    m.conf_w, m.conf_b, m.calib_x, m.calib_y = calibrated_lr(X, Y, W)
    print("confidence model:", dict(zip(S.CONFIDENCE_FEATURES, np.round(m.conf_w, 3))), flush=True)

    # 4. threshold: the lowest that still refuses HIDDEN_REFUSED of the gold-hidden SQuAD tune
    # questions: answer whatever can be answered, and say "not found" when the page is gone
    conf = m.confidence(X)
    # SQuAD's hidden questions are truly unanswerable (one gold paragraph); a FAQ's gold pages
    # are the pages its answer links, and hiding them often leaves another page that answers
    hidden = np.array([r["hidden"] and r["set"] in UNANSWERABLE_SETS for r in rows])
    gone = np.array([r["hidden"] for r in rows])  # ~gone: the questions with their gold pages
    table = []
    for t in THRESHOLDS:
        ans = conf >= t
        table.append({"threshold": t, "refused_hidden": round(float(np.average(~ans[hidden], weights=W[hidden])), 4),
                      "answered": round(float(np.average(ans[~gone], weights=W[~gone])), 4),
                      "right": round(float(np.average((ans & Y)[~gone], weights=W[~gone])), 4)})
    m.threshold = next((r["threshold"] for r in table if r["refused_hidden"] >= HIDDEN_REFUSED), THRESHOLDS[-1])
    print("thresholds on tune:", table, flush=True)
    print("threshold:", m.threshold, flush=True)
    m.version = time.strftime("%Y%m%d") + "-" + "+".join(sets)
    m.fitted_on = {name: {"tune_questions": len(v["tune"]), "eval_questions": len(v["eval"])} for name, v in sets.items()}
    fit_rules_confidence(sets, answerers, m, wset)
    for name in sets:
        answerers[name].p.threshold = m.threshold
    report = {"model": to_dict(m), "sentence_features_on_tune": tried_cols, "compositions_on_tune": tried, "thresholds_on_tune": table,
              "rules_eval": rules_summary(sets, answerers, model=m), "tune": summarize(answer_rows("tune", m, compose), m),
              "eval": summarize(answer_rows("eval", m, compose), m)}
    for split in ("tune", "eval"):
        report[f"reliability_{split}"] = reliability(answer_rows(split, m, compose), m)
    # every question answered: what the selection itself picks, whatever the threshold
    report["eval_threshold_off"] = summarize(answer_rows("eval", m, compose), replace(m, threshold=-1.0))
    report["rules_confidence_eval"] = rules_calibration_report(sets, answerers, m)
    print(json.dumps({k: report[k] for k in ("tune", "eval")}, indent=1), flush=True)
    write_json(args.results, report)
    if args.write:
        Path(S.MODEL_FILE).write_text(json.dumps(to_dict(m), indent=1) + "\n")
        print("wrote", S.MODEL_FILE)


LISTWISE_L2 = 0.1  # on features scaled to unit spread: keeps weights of rare features from running off
MIN_GAIN = 0.01  # a feature joins the sentence model when it raises the held-out log likelihood this much
MAX_SENTENCE_FEATURES = 8


def sentence_groups(sets: dict, answerers: dict, m, wset: dict) -> list[dict]:
    """Per tune question with gold phrases: its answerable sentences' features, log page
    probabilities and labels (on a gold page and holding a gold phrase)."""
    groups = []
    for name, qs in sets.items():
        for q, sc in zip(qs["tune"], score_all(answerers[name], m, qs["tune"])):
            if not q["answers"] or not len(sc.flat):
                continue
            ok = sc.can_answer & (sc.page_p[sc.page_of] > 0)
            if not ok.any():
                continue
            ys = np.array([sc.docs[sc.page_of[i]] in q["rel"] and M.contains_span(s, q["answers"])
                           for i, (_, s) in enumerate(sc.flat)])[ok]
            groups.append({"set": name, "x": sc.sent_x[ok], "y": ys, "w": wset[name],
                           "lp": np.log(np.maximum(sc.page_p[sc.page_of[ok]], 1e-9))})
    return groups


def _design(groups: list[dict], cols: list[int]):
    """Stacked rows (chosen columns + log page prob), group offsets, labels, group weights."""
    x = np.concatenate([np.column_stack([g["x"][:, cols], g["lp"]]) for g in groups])
    y = np.concatenate([g["y"] for g in groups]).astype(bool)
    sizes = np.array([len(g["y"]) for g in groups])
    return x, y, np.r_[0, np.cumsum(sizes)[:-1]], sizes, np.array([g["w"] for g in groups])


def fit_listwise(groups: list[dict], cols: list[int]) -> np.ndarray:
    """Conditional logit: maximize, per question, log(sum over right sentences of exp(z) / sum over
    all of exp(z)), z = x . beta; L2 on scale-standardized columns. Returns beta (last: the page weight)."""
    from scipy.optimize import minimize
    fit = [g for g in groups if g["y"].any() and not g["y"].all()]
    x, y, starts, sizes, gw = _design(fit, cols)
    scale = x.std(axis=0) + 1e-9
    xs = x / scale
    gid = np.repeat(np.arange(len(fit)), sizes)
    rw = gw[gid]

    def loss(b):
        z = xs @ b
        zmax = np.maximum.reduceat(z, starts)[gid]
        e = np.exp(z - zmax)
        all_sum = np.add.reduceat(e, starts)
        pos_sum = np.add.reduceat(np.where(y, e, 0.0), starts)
        f = float(gw @ (np.log(all_sum) - np.log(pos_sum))) + 0.5 * LISTWISE_L2 * float(b @ b)
        grad_row = rw * (e / all_sum[gid] - np.where(y, e, 0.0) / pos_sum[gid])
        return f, xs.T @ grad_row + LISTWISE_L2 * b

    b0 = np.zeros(xs.shape[1])
    b0[-1] = 1.0
    res = minimize(loss, b0, jac=True, method="L-BFGS-B")
    return res.x / scale


def lead_right(groups: list[dict], cols: list[int], beta: np.ndarray) -> float:
    """Share of tune questions whose top sentence is right: SQuAD and the documentation sets
    (pooled) averaged, so neither dominates the choice of features."""
    hit = {"squad": [], "docs": []}
    for g in groups:
        z = g["x"][:, cols] @ beta[:-1] + beta[-1] * g["lp"]
        hit["squad" if g["set"] == "squad" else "docs"].append(bool(g["y"][int(np.argmax(z))]))
    return float(np.mean([np.mean(v) for v in hit.values() if v]))


def held_out_loglik(groups: list[dict], cols: list[int], beta: np.ndarray) -> float:
    """Weighted mean log probability the model gives a question's right sentences (over questions
    with a right sentence): smoother than the share of right leads, so a feature is judged by more
    than a few flipped questions of a small set."""
    ll, w = 0.0, 0.0
    for g in groups:
        if not g["y"].any():
            continue
        z = g["x"][:, cols] @ beta[:-1] + beta[-1] * g["lp"]
        z = z - z.max()
        ll += g["w"] * (np.log(np.exp(z[g["y"]]).sum()) - np.log(np.exp(z).sum()))
        w += g["w"]
    return ll / max(w, 1e-9)


def cv_score(groups: list[dict], cols: list[int], folds: int = 2) -> float:
    """held_out_loglik of held-out questions (dealt to folds in turn): a feature must help
    questions it was not fitted on."""
    out = []
    for k in range(folds):
        fit = [g for i, g in enumerate(groups) if i % folds != k]
        held = [g for i, g in enumerate(groups) if i % folds == k]
        out.append(held_out_loglik(held, cols, fit_listwise(fit, cols)))
    return float(np.mean(out))


def select_sentence_model(groups: list[dict]):
    """Forward selection over SENTENCE_FEATURES by held-out log likelihood on tune: (columns, beta, steps)."""
    cols: list[int] = []
    score = cv_score(groups, cols)
    steps = [{"features": [], "cv_loglik": round(score, 4), "lead_right": round(lead_right(groups, cols, fit_listwise(groups, cols)), 4)}]
    while len(cols) < MAX_SENTENCE_FEATURES:
        tried = [(cv_score(groups, cols + [c]), c) for c in range(len(S.SENTENCE_FEATURES)) if c not in cols]
        if not tried:
            break
        r, c = max(tried)
        if r < score + MIN_GAIN:
            break
        score, cols = r, cols + [c]
        steps.append({"features": [S.SENTENCE_FEATURES[c] for c in cols], "cv_loglik": round(score, 4),
                      "lead_right": round(lead_right(groups, cols, fit_listwise(groups, cols)), 4)})
        print("sentence features:", steps[-1], flush=True)
    return cols, fit_listwise(groups, cols), steps


def summarize(rows: list[dict], m) -> dict:
    """Per set, normal retrieval: right page cited, gold phrase, right, answered, words, citation
    precision, and the confidence's AUC and calibration over answered questions."""
    out = {}
    for name in sorted({r["set"] for r in rows}):
        mine = [r for r in rows if r["set"] == name and not r["hidden"]]
        hid = [r for r in rows if r["set"] == name and r["hidden"]]
        for r in mine:
            r["ok"] = r["answered"] and r["conf"] is not None and r["conf"] >= m.threshold
        ans = [r for r in mine if r["ok"]]
        confs = [r["conf"] or 0.0 for r in mine]
        pos = [c for c, r in zip(confs, mine) if r["right"]]
        neg = [c for c, r in zip(confs, mine) if not r["right"]]
        out[name] = {"questions": len(mine),
                     "right_page_cited": round(M.mean(r["page"] and r["ok"] for r in mine), 4),
                     "gold_phrase": round(M.mean(r["phrase"] and r["ok"] for r in mine), 4),
                     "right": round(M.mean(r["right"] and r["ok"] for r in mine), 4),
                     "answered": round(len(ans) / max(1, len(mine)), 4),
                     "not_found_hidden": round(M.mean((r["conf"] or 0.0) < m.threshold for r in hid), 4),
                     "words": round(M.mean(r["words"] for r in ans), 2) if ans else None,
                     "cit_prec": round(M.mean(r["cit_prec"] for r in ans if r["cit_prec"] is not None), 4) if ans else None,
                     "auc_conf_vs_right": _finite(M.auc(pos, neg)),
                     "mean_conf_answered": round(M.mean(r["conf"] for r in ans), 4) if ans else None,
                     "share_right_answered": round(M.mean(r["right"] for r in ans), 4) if ans else None}
    return out


def model_rows(sets: dict, answerers: dict, m, split: str) -> list[dict]:
    """Per question and retrieval (normal, gold hidden): the shipped model's answer as summarize reads it."""
    rows = []
    for name, qs in sets.items():
        a = answerers[name]
        for key in ("head", "uhead"):
            res = a.answer([q["text"] for q in qs[split]], [q[key] for q in qs[split]],
                           qvecs=np.stack([q["qv"] for q in qs[split]]))
            for q, r in zip(qs[split], res):
                rows.append(answer_row(name, key, q, r))
    return rows


def answer_row(name: str, key: str, q: dict, r) -> dict:
    """One answer as summarize reads it (key: head, normal retrieval; uhead, gold pages hidden)."""
    cited = [c["doc_id"] for c in r.citations]
    return {"set": name, "hidden": key == "uhead", "conf": r.confidence,
            "right": r.status == "answered" and key == "head" and right(r.answer, cited, q),
            "page": any(d in q["rel"] for d in cited) and key == "head",
            "phrase": bool(q["answers"]) and M.contains_span(r.answer, q["answers"]),
            "words": len(r.answer.split()), "answered": r.status == "answered",
            "cit_prec": M.citation_precision(cited, q["rel"]) if key == "head" else None}


def reliability(rows: list[dict], m, threshold=None) -> dict:
    """Reliability tables of the answered questions (normal retrieval): SQuAD, and the documentation
    sets pooled; each band's count, mean confidence and share right, and the ECE."""
    out = {}
    for group, names in (("squad", {"squad"}), ("docs", {r["set"] for r in rows} - {"squad"})):
        ans = [r for r in rows if r["set"] in names and not r["hidden"] and r["answered"]
               and r["conf"] is not None and r["conf"] >= (m.threshold if threshold is None else threshold)]
        conf, ok = [r["conf"] for r in ans], [r["right"] for r in ans]
        table = [{k: (round(v, 4) if isinstance(v, float) and np.isfinite(v) else (None if isinstance(v, float) else v))
                  for k, v in row.items()} for row in M.reliability_table(conf, ok) if row["count"]]
        out[group] = {"answered": len(ans), "ece": _finite(M.expected_calibration_error(conf, ok)) if ans else None,
                      "bands": table}
    return out


def rules_rows(sets: dict, answerers: dict, split: str, model=None) -> list[dict]:
    """Per question and retrieval (normal, gold hidden): the rules' answer, its confidence features
    and whether it is right; with `model`, its confidence under that model's rules calibration."""
    rows = []
    for name, qs in sets.items():
        a = answerers[name]
        saved = (a.p.answer_model, a.p.confidence_model, a.p.threshold)
        a.p.answer_model, a.p.confidence_model, a.p.threshold = None, model, a.rules_threshold
        try:
            for key in ("head", "uhead"):
                res = a.answer([q["text"] for q in qs[split]], [q[key] for q in qs[split]],
                               qvecs=np.stack([q["qv"] for q in qs[split]]))
                for q, r in zip(qs[split], res):
                    if r.status != "answered":
                        continue
                    cited = [c["doc_id"] for c in r.citations]
                    rows.append({"set": name, "hidden": key == "uhead", "conf": r.confidence, "answered": True,
                                 "x": a.rules_features(q["text"], r, list(q[key][:a.p.read_chunks]), q["qv"]),
                                 "right": key == "head" and right(r.answer, cited, q)})
        finally:
            a.p.answer_model, a.p.confidence_model, a.p.threshold = saved
    return rows


def fit_rules_confidence(sets: dict, answerers: dict, m, wset: dict) -> None:
    """The rules answers' confidence: logistic regression over RULES_CONFIDENCE_FEATURES on the tune
    halves' answered questions (normal and gold hidden), isotonic calibration on out-of-fold predictions."""
    rows = rules_rows(sets, answerers, "tune", m)  # m's page model chooses the page (answer.page_first)
    X = np.array([r["x"] for r in rows])
    Y = np.array([r["right"] for r in rows])
    W = np.array([wset[r["set"]] for r in rows])
    m.rules_w, m.rules_b, m.rules_calib_x, m.rules_calib_y = calibrated_lr(X, Y, W)
    print("rules confidence:", dict(zip(S.RULES_CONFIDENCE_FEATURES, np.round(m.rules_w, 3))), flush=True)


def calibrated_lr(X, Y, W):
    """(weights, bias, calibration x, calibration y): a logistic regression and the isotonic map of its
    out-of-fold predictions (5 folds) to the share right."""
    from sklearn.isotonic import IsotonicRegression
    from sklearn.model_selection import StratifiedKFold
    oof = np.zeros(len(Y))
    for tr, te in StratifiedKFold(5, shuffle=True, random_state=0).split(X, Y):
        w, b = fit_lr(X[tr], Y[tr], W[tr])
        oof[te] = S._sigmoid(X[te] @ w + b)
    w, b = fit_lr(X, Y, W)
    iso = IsotonicRegression(y_min=0.0, y_max=1.0, out_of_bounds="clip").fit(oof, Y, sample_weight=W)
    return w, b, np.asarray(iso.X_thresholds_), np.asarray(iso.y_thresholds_)


def rules_calibration_report(sets: dict, answerers: dict, m) -> dict:
    """The rules answers' confidence on the eval halves: per set AUC, mean confidence vs share right,
    and reliability tables (SQuAD; the documentation sets pooled)."""
    rows = rules_rows(sets, answerers, "eval", m)
    out = {"sets": {}}
    for name in sets:
        mine = [r for r in rows if r["set"] == name and not r["hidden"]]
        pos = [r["conf"] for r in mine if r["right"]]
        neg = [r["conf"] for r in mine if not r["right"]]
        out["sets"][name] = {"answered": len(mine), "auc_conf_vs_right": _finite(M.auc(pos, neg)),
                             "mean_conf": _finite(M.mean(r["conf"] for r in mine)) if mine else None,
                             "share_right": _finite(M.mean(r["right"] for r in mine)) if mine else None}
    for r in rows:
        r["answered"] = True
    out["reliability"] = reliability(rows, m, threshold=-1.0)
    return out


def _finite(x: float):
    """Rounded, or None where undefined (an AUC over a set with no right answer): JSON has no NaN."""
    return round(float(x), 4) if np.isfinite(x) else None


def rules_summary(sets: dict, answerers: dict, split: str = "eval", model=None) -> dict:
    """The same figures for the hand-weighted selection (answer.selection: rules) on the same
    cached retrieval, its evidence_score standing for a confidence (AUC only: it is not calibrated);
    `model`: the fitted model whose page model chooses the page (answer.page_first), else the shipped one."""
    out = {}
    for name, qs in sets.items():
        a = answerers[name]
        saved = (a.p.answer_model, a.p.confidence_model, a.p.threshold)
        a.p.answer_model, a.p.threshold = None, a.rules_threshold
        a.p.confidence_model = model or a.p.confidence_model
        try:
            res = a.answer([q["text"] for q in qs[split]], [q["head"] for q in qs[split]],
                           qvecs=np.stack([q["qv"] for q in qs[split]]))
        finally:
            a.p.answer_model, a.p.confidence_model, a.p.threshold = saved
        rows = []
        for q, r in zip(qs[split], res):
            cited = [c["doc_id"] for c in r.citations]
            ok = r.status == "answered"
            rows.append({"ok": ok, "page": ok and any(d in q["rel"] for d in cited),
                         "phrase": ok and bool(q["answers"]) and M.contains_span(r.answer, q["answers"]),
                         "right": ok and right(r.answer, cited, q), "words": len(r.answer.split()),
                         "evidence": r.evidence_score})
        pos = [r["evidence"] for r in rows if r["right"]]
        neg = [r["evidence"] for r in rows if not r["right"]]
        out[name] = {"questions": len(rows), "answered": round(M.mean(r["ok"] for r in rows), 4),
                     "right_page_cited": round(M.mean(r["page"] for r in rows), 4),
                     "gold_phrase": round(M.mean(r["phrase"] for r in rows), 4),
                     "right": round(M.mean(r["right"] for r in rows), 4),
                     "words": round(M.mean(r["words"] for r in rows if r["ok"]), 2),
                     "auc_evidence_vs_right": _finite(M.auc(pos, neg))}
    return out


def bootstrap_model_file(write: bool, whole_fit: bool) -> None:
    """The engine the fit opens loads the shipped model file; one fitted on other features (the
    feature lists changed) is refused there. What this fit refits anyway is dropped first (with
    --write): the rules' confidence alone (--rules-only), or the whole model (an unfitted one)."""
    try:
        S.AnswerModel.load()
        return
    except ValueError as e:
        if not write:
            raise SystemExit(f"{e}; run with --write to refit it")
        stale = e
    d = json.loads(Path(S.MODEL_FILE).read_text())
    d.pop("rules_confidence", None)
    try:
        S.AnswerModel.from_dict(d)
    except ValueError:
        if not whole_fit:
            raise SystemExit(f"{stale}; the selection's parts are stale too: refit the whole model") from None
        d = to_dict(blank_model())
    Path(S.MODEL_FILE).write_text(json.dumps(d, indent=1) + "\n")
    S.load_model.cache_clear()
    print("the shipped model was fitted on other features: its stale parts are dropped until this fit ends", flush=True)


def to_dict(m: S.AnswerModel) -> dict:
    r = lambda v: [round(float(x), 6) for x in v]  # noqa: E731
    return {"version": m.version,
            "fit_command": "python -m bench.fit_answer_model --write",
            "fitted_on": m.fitted_on,
            "page": {"features": list(S.PAGE_FEATURES), "weights": r(m.page_w), "bias": round(m.page_b, 6)},
            "sentence": {"features": list(S.SENTENCE_FEATURES), "weights": r(m.sent_w), "bias": round(m.sent_b, 6),
                         "kind": m.sent_kind, "page_weight": round(m.page_weight, 6)},
            "confidence": {"features": list(S.CONFIDENCE_FEATURES), "weights": r(m.conf_w),
                           "bias": round(m.conf_b, 6)},
            "calibration": {"x": r(m.calib_x), "y": r(m.calib_y)},
            **({} if m.rules_w is None else {"rules_confidence": {
                "features": list(S.RULES_CONFIDENCE_FEATURES), "weights": r(m.rules_w), "bias": round(m.rules_b, 6),
                "calibration": {"x": r(m.rules_calib_x), "y": r(m.rules_calib_y)}}}),
            "compose": m.compose, "threshold": m.threshold}


if __name__ == "__main__":
    main()
