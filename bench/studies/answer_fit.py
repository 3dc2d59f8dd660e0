"""Fit the extractive answerer's evidence model and selection on SQuAD (tune) and report both samples.

    python -m bench.studies.answer_fit --index out/eval/squad/index [--dataset ../shared/data/squad-dev-half]

Two disjoint question samples of the dev half: "eval" (the 500 questions of `ragbeam eval
--max-queries 500`, seed 0) only reports; "tune" (every other question, 4,897) fits and picks.

Evidence (kept: the profile's fit, transforms/ingest/profiles.py ScoreFit.evidence_model): logistic regression, answerable
(normal retrieval) vs made-unanswerable (the question's article hidden, as `ragbeam eval` does),
over the sentence evidence, the best chunk cosine and the best BM25 coverage.

Selection and threshold (kept: configs/schema.py AnswerConfig): a grid over the gap a further
sentence must stay within, the bonus for one from the already-cited chunk, the most sentences
and the evidence threshold, chosen on tune: the most gold spans among the settings that meet
every answer target of issue 11 (<= 40 words, citation precision >= 0.80, not found on <= 5%
of answerable and >= 90% of unanswerable questions) with one standard error to spare for a
500-question sample, so that the eval sample's figures are not a coin toss around a target.

--evidence-only refits only the evidence model and its threshold, for another embedding profile
(RAGBEAM__EMBED__PROFILE=<p>, its squad index), the configured selection kept; with --lexical
W1,W2,... it first picks the selection's lexical_weight on tune (most gold spans, nothing refused).
--joint W1,W2,... refits the evidence model and then the whole selection at once: lexical weight
x gap (0.08, 0.12, 0.16) x same-chunk bonus (0.1, 0.2) x sentences x threshold, picked on tune
as above (results bench/results/answer_fit-joint-<profile>.json).

Tried, not kept: a listwise linear model (softmax over a question's sentences) over 14
sentence features, against the hand-weighted score, by how often the top sentence holds a
gold span; small-to-big (the top chunk's neighbours in the context). Writes
bench/results/answer_fit.json, and the whole grid a setting a line to <--out>/answer_fit_grid.jsonl.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import pickle
import re
import time
from pathlib import Path

import numpy as np
from scipy.optimize import minimize

from bench.jsonfile import write_json
from bench.data import ROOT
from transforms.common.words import ANSWER_STOPWORDS, WORD
from transforms.evaluation import metrics as M

EVIDENCE_FEATURES = ("sentence_evidence", "best_chunk_cosine", "best_bm25_coverage")

_NEW_SPAN = re.compile(r"\b(?:[A-Z][a-zA-Z]+|\d[\d,.]*)\b")

SELECTION_FEATURES = (
    "cos",            # cosine(question, sentence), index-time sentence vector
    "lex_idf",        # idf-weighted share of the question's content words in the sentence
    "lex",            # plain share of the question's content words
    "type",           # holds the kind of span the wh-word asks for (year, number, name)
    "chunk_score",    # the chunk's fused first-stage score (0..1)
    "inv_rank",       # 1 / the chunk's rank
    "first",          # first sentence of its chunk
    "log_words",      # log(1 + words)
    "nb_cos",         # best cosine of the sentence's neighbours in its chunk
    "nb_lex_idf",     # best idf-weighted overlap of its neighbours
    "cos_gap",        # cos minus the best cos of the question's sentences (<= 0)
    "lex_gap",        # lex_idf minus the best lex_idf (<= 0)
    "bigram",         # share of the question's content-word bigrams found in the sentence
    "new_span",       # holds a capitalised word or number that the question does not
)



def content_words(text: str) -> list[str]:
    """transforms.common.words.content_words in order, repeats kept (for bigrams)."""
    return [w for w in WORD.findall(text.lower()) if w not in ANSWER_STOPWORDS and len(w) > 1]


def bigrams(words: list[str]) -> set[tuple[str, str]]:
    return set(zip(words, words[1:]))


def sentence_features(question: str, flat, cos: np.ndarray, cands, idf=None, idf_max: float = 0.0,
                      kind=None, type_match=None) -> np.ndarray:
    """[n_sentences, len(SELECTION_FEATURES)] for `flat` = [(candidate index, sentence)] in
    chunk order (neighbours are adjacent entries of the same candidate)."""
    n = len(flat)
    x = np.zeros((n, len(SELECTION_FEATURES)), np.float64)
    if n == 0:
        return x
    qlist = content_words(question)
    qset = set(qlist)
    qbi = bigrams(qlist)
    w = {t: (idf.get(t, idf_max) if idf is not None else 1.0) for t in qset}
    total = sum(w.values()) or 1.0
    qlower = {t for t in WORD.findall(question.lower())}
    lex_idf = np.zeros(n)
    for i, (ci, s) in enumerate(flat):
        words = content_words(s)
        ws = set(words)
        hit = qset & ws
        lex_idf[i] = sum(w[t] for t in hit) / total
        x[i, 2] = len(hit) / len(qset) if qset else 0.0
        x[i, 3] = type_match(kind, s, qset) if (kind and type_match) else 0.0
        c = cands[ci]
        x[i, 4] = float(c.score or 0.0)
        x[i, 5] = 1.0 / float(c.rank or ci + 1)
        x[i, 6] = float(i == 0 or flat[i - 1][0] != ci)
        x[i, 7] = np.log1p(len(s.split()))
        x[i, 12] = len(qbi & bigrams(words)) / len(qbi) if qbi else 0.0
        x[i, 13] = float(any(m.group(0).lower() not in qlower for m in _NEW_SPAN.finditer(s)))
    x[:, 0] = cos
    x[:, 1] = lex_idf
    for i, (ci, _) in enumerate(flat):
        nb = [j for j in (i - 1, i + 1) if 0 <= j < n and flat[j][0] == ci]
        if nb:
            x[i, 8] = max(cos[j] for j in nb)
            x[i, 9] = max(lex_idf[j] for j in nb)
    x[:, 10] = cos - cos.max()
    x[:, 11] = lex_idf - lex_idf.max()
    return x


def weight_vector(weights: dict[str, float], names) -> np.ndarray:
    return np.array([weights.get(f, 0.0) for f in names], np.float64)


def softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max())
    return e / e.sum()


def fit_listwise(groups, l2=1e-2):
    """groups: [(x [n, f], y [n] bool)] with a positive each; maximise log P(positives)."""
    allx = np.concatenate([x for x, _ in groups])
    mu, sd = allx.mean(0), allx.std(0) + 1e-9
    f = allx.shape[1]

    def loss(w):
        total, grad = 0.0, np.zeros(f)
        for x, y in groups:
            xs = (x - mu) / sd
            z = xs @ w
            p = np.exp(z - z.max())
            p /= p.sum()
            pp = p[y].sum()
            total -= np.log(pp + 1e-12)
            grad -= (p[y] / (pp + 1e-12)) @ xs[y] - p @ xs
        return total + l2 * len(groups) * w @ w, grad + 2 * l2 * len(groups) * w

    return minimize(loss, np.zeros(f), jac=True, method="L-BFGS-B").x / sd


def fit_logistic(x, y, l2=1e-3):
    """(weights, bias) in raw feature units."""
    mu, sd = x.mean(0), x.std(0) + 1e-9
    xs = np.hstack([(x - mu) / sd, np.ones((len(x), 1))])

    def loss(w):
        p = 1 / (1 + np.exp(-(xs @ w)))
        ll = -np.sum(y * np.log(p + 1e-12) + (1 - y) * np.log(1 - p + 1e-12))
        reg = np.r_[w[:-1], 0.0]
        return ll + l2 * len(x) * reg @ reg, xs.T @ (p - y) + 2 * l2 * len(x) * reg

    r = minimize(loss, np.zeros(xs.shape[1]), jac=True, method="L-BFGS-B").x
    return r[:-1] / sd, float(r[-1] - (mu / sd) @ r[:-1])


def evidence_rows(a, qs):
    """EVIDENCE_FEATURES per question: normal retrieval (label 1), article hidden (label 0)."""
    x, y = [], []
    for q in qs:
        for key, label in (("head", 1), ("uhead", 0)):
            cands = list(q[key][:a.p.top_chunks])
            a.score(q["text"], np.asarray(q["qv"], np.float32), cands, None)
            x.append(a.evidence_features(a._evidence or 0.0, cands))
            y.append(label)
    return np.array(x), np.array(y, float)


def selection_experiment(a, sets, l2=1e-2) -> dict:
    """Top-1 gold-sentence rate: the hand score vs a listwise model fitted on tune."""
    from transforms.query.extract import answer_type, type_match
    rows, own = {}, {}
    for name, qs in sets.items():
        rows[name], own[name] = [], []
        for q in qs:
            cands = list(q["head"][:a.p.top_chunks])
            qv = np.asarray(q["qv"], np.float32)
            flat, hand, _ = a.score(q["text"], qv, cands, None)
            if not flat:
                continue
            _, cos, mat = a.sentences(qv, cands, None)
            x = sentence_features(q["text"], flat, cos, cands, a.idf, a.idf_max, answer_type(q["text"]), type_match)
            y = np.array([M.contains_span(s, q["answers"]) for _, s in flat], bool)
            # + the hand score and the products of question and sentence vector components
            # (a learned weighting of the cosine)
            xp = np.hstack([x, hand[:, None], mat * qv[None, :]])
            rows[name].append((x, y, hand, xp))
            top = int(np.argmax(hand))  # is the best sentence from the question's own paragraph?
            own[name].append((cands[flat[top][0]].doc_id in q["rel"], bool(y[top])))
    w = fit_listwise([(x, y) for x, y, _, _ in rows["tune"] if y.any()], l2)
    wp = fit_listwise([(xp, y) for _, y, _, xp in rows["tune"] if y.any()], l2)
    out = {"weights": dict(zip(SELECTION_FEATURES, np.round(w, 4).tolist()))}
    for name, r in rows.items():
        n = len(sets[name])
        ranks = [next((k for k, i in enumerate(np.argsort(-h, kind="stable")) if y[i]), None) for _, y, h, _ in r]
        out[name] = {"hand_top1": sum(bool(y[int(np.argmax(h))]) for _, y, h, _ in r) / n,
                     "listwise_top1": sum(bool(y[int(np.argmax(x @ w))]) for x, y, _, _ in r) / n,
                     "listwise_with_vector_products_top1": sum(bool(y[int(np.argmax(xp @ wp))]) for _, y, _, xp in r) / n,
                     "hand_top1_from_own_paragraph": sum(o for o, _ in own[name]) / n,
                     "hand_top1_gold_when_from_own_paragraph": M.mean(g for o, g in own[name] if o),
                     # the ceiling of a k-sentence answer under the hand score
                     "hand_gold_in_top_k": {k: sum(1 for x in ranks if x is not None and x < k) / n for k in (1, 2, 3)},
                     "gold_in_top_chunk": sum(bool(q["head"]) and M.contains_span(q["head"][0].text or "", q["answers"])
                                              for q in sets[name]) / n,
                     "gold_in_top_chunks": sum(any(M.contains_span(c.text or "", q["answers"])
                                                   for c in q["head"][:a.p.top_chunks]) for q in sets[name]) / n}
    return out

GAPS = (0.06, 0.08, 0.10, 0.12, 0.14, 0.16, 0.20)
BONUSES = (0.05, 0.1, 0.15, 0.2)
MAX_SENTENCES = (2, 3)
JOINT_GAPS = (0.08, 0.12, 0.16)
JOINT_BONUSES = (0.1, 0.2)
THRESHOLDS = tuple(round(0.30 + 0.02 * i, 2) for i in range(16))  # 0.30 .. 0.60


def at_threshold(rows, t: float) -> dict:
    """The answer figures `ragbeam eval` reports, had the evidence threshold been t (rows:
    bench.studies.answer_variants.answer_rows of an answerer that refuses nothing on evidence)."""
    ans = [x for x in rows if x["status"] == "answered" and x["evidence"] >= t]
    words = [x["words"] for x in ans]
    return {"gold": round(sum(x["gold"] for x in ans) / len(rows), 4),
            "words": round(float(np.mean(words)), 2) if words else None,
            "words_sd": round(float(np.std(words)), 2) if words else None,
            "cit_prec": round(M.mean(x["cit_prec"] for x in ans if x["cit_prec"] is not None) or 0.0, 4),
            "nf_ans": round(1 - len(ans) / len(rows), 4),
            "nf_unans": round(float(np.mean([not (x["u_status"] == "answered" and x["u_evidence"] >= t)
                                             for x in rows])), 4)}


def targets_with_margin(n: int, words_sd) -> dict:
    """Issue 11's answer targets, each moved by one standard error of an n-question sample."""
    se = lambda p: float(np.sqrt(p * (1 - p) / n))  # noqa: E731
    sd = float(np.median([s for s in words_sd if s is not None]))
    return {"words_max": round(40 - sd / np.sqrt(n), 2), "cit_prec_min": round(0.80 + se(0.80), 4),
            "nf_ans_max": round(0.05 - se(0.05), 4), "nf_unans_min": round(0.90 + se(0.90), 4)}


def meets(r: dict, need: dict) -> bool:
    return (r["words"] is not None and r["words"] <= need["words_max"] and r["cit_prec"] >= need["cit_prec_min"]
            and r["nf_ans"] <= need["nf_ans_max"] and r["nf_unans"] >= need["nf_unans_min"])


def chunk_ordinals(e) -> list[tuple]:
    """(chunk_no, doc_id, ordinal) of every live chunk. The segments' rows hold no ordinal, so
    it comes from the version's chunk shards, by chunk_id (the pre-segment artifact's chunks
    table had the column)."""
    from bench.studies.segview import live_mask
    from transforms.index.shards import CHUNKS_DIR, read_table

    t = read_table(e.segments.version_dir, CHUNKS_DIR, ["chunk_id", "ordinal"])
    ordinal = dict(zip(t.column("chunk_id").to_pylist(), t.column("ordinal").to_pylist()))
    live = live_mask(e)
    ids = [i for s in e.searchers for i in s.seg.rows.column("chunk_id").to_pylist()]
    docs = e.doc_ids
    return [(c, docs[c], ordinal[cid]) for c, cid in enumerate(ids) if live[c] and cid in ordinal]


def main(argv=None) -> None:
    from bench.studies.answer_variants import answer_rows, collect, score_set
    from bench.studies.segview import live_texts
    from configs.schema import load_config
    from bench.studies.devsets import DATA_ROOT, squad_samples
    from transforms.evaluation.datasets import DocLabels, load_dataset
    from transforms.evaluation.evaluator import Evaluator
    from transforms.index.publish import resolve_index
    from transforms.query.extract import SentenceAnswerer, SentenceParams

    ap = argparse.ArgumentParser()
    ap.add_argument("--index", default="out/eval/squad/index")
    ap.add_argument("--dataset", default=str(DATA_ROOT / "squad-dev-half"))
    ap.add_argument("--out", default="out/bench/answer_fit")
    ap.add_argument("--results", default=str(ROOT / "bench/results/answer_fit.json"))
    ap.add_argument("--evidence-only", action="store_true",
                    help="refit the evidence model and its threshold for another embedding profile, the "
                         "configured selection kept (no selection grid, no small-to-big or listwise runs)")
    ap.add_argument("--lexical", default="", help="with --evidence-only: answer.lexical_weight values to try "
                    "first (most gold spans on tune, nothing refused); the threshold is then picked with the best")
    ap.add_argument("--joint", default="", help="answer.lexical_weight values W1,W2,...: the evidence model, then "
                    "one grid over lexical weight x gap x same-chunk bonus x sentences x threshold (0.05 .. 0.95), "
                    "picked on tune as the selection grid is; no small-to-big or listwise runs")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    cfg = load_config(None)
    vdir = resolve_index(args.index)
    ds = load_dataset(args.dataset)
    eval_ids, tune_ids = squad_samples(ds, tune_size=None)
    ev = Evaluator(vdir, cfg)
    pkl = os.path.join(args.out, f"sets-all-{os.path.basename(vdir)}.pkl")
    if os.path.exists(pkl):
        with open(pkl, "rb") as f:
            sets = pickle.load(f)
    else:  # retrieval once per question, normally and with its article hidden (the engine's own)
        labels = DocLabels(vdir, {d for q in eval_ids + tune_ids for d in ds.qrels[q]})
        t = time.perf_counter()
        sets = {"tune": collect(ev, ds, tune_ids, labels), "eval": collect(ev, ds, eval_ids, labels)}
        print(f"retrieval: {time.perf_counter() - t:.1f}s", flush=True)
        with open(pkl, "wb") as f:
            pickle.dump(sets, f)
    e = ev.engine
    a = e.answerer
    if not isinstance(a, SentenceAnswerer):
        raise SystemExit("answer.kind must be extractive")
    if cfg.answer.lexical_idf:  # the engine sets it per batch from the hits' word df: here, once for every word
        a.set_idf(live_texts(e))
    sentences = e.segments.sentences  # the version's sentence store (spans and int8 vectors)
    out = {"config": {"answer": cfg.answer.model_dump(exclude={"api_key"}), "retrieve": cfg.retrieve.model_dump()}}

    def report(label, params):
        b = SentenceAnswerer(None, sentences, params)
        b.idf, b.idf_max = a.idf, a.idf_max
        row = {k: {m: (round(v, 4) if isinstance(v, float) else v) for m, v in score_set(b, qs).items()
                   if not m.startswith("_")} for k, qs in sets.items()}
        out[label] = row
        print(label, json.dumps(row), flush=True)

    base = a.p
    if args.evidence_only and args.lexical:  # the selection's word weight, on tune: nothing refused
        tried = {}
        for w in (float(x) for x in args.lexical.split(",")):
            b = SentenceAnswerer(None, sentences, SentenceParams(**{**base.__dict__, "threshold": -1.0,
                                                                    "lexical_weight": w}))
            b.idf, b.idf_max = a.idf, a.idf_max
            tried[w] = round(float(np.mean([r["gold"] for r in answer_rows(b, sets["tune"])])), 4)
            print(f"lexical_weight {w}: gold on tune {tried[w]}", flush=True)
        best_w = max(tried, key=tried.get)
        out["lexical_weight_gold_on_tune"] = {str(k): v for k, v in tried.items()}
        out["lexical_weight"] = best_w
        base = SentenceParams(**{**base.__dict__, "lexical_weight": best_w})
    # the sentence evidence alone, at its own tuned threshold
    report("sentence_evidence", SentenceParams(**{**base.__dict__, "evidence_model": None, "threshold": 0.58}))
    xe, ye = evidence_rows(SentenceAnswerer(None, sentences, SentenceParams(**{**base.__dict__, "evidence_model": None})), sets["tune"])
    w, b = fit_logistic(xe, ye)
    model = tuple(round(float(v), 3) for v in w) + (round(b, 3),)
    out["evidence_model"] = dict(zip(EVIDENCE_FEATURES + ("bias",), model))
    out["evidence_auc_by_feature"] = {f: round(M.auc(list(xe[ye == 1, i]), list(xe[ye == 0, i])), 4)
                                      for i, f in enumerate(EVIDENCE_FEATURES)}
    print("evidence_model =", model, flush=True)
    # selection and threshold together: answer once per setting with every question answered,
    # then apply each threshold to the recorded evidence
    grid = {}
    settings = [(base.lexical_weight,) + s for s in itertools.product(GAPS, BONUSES, MAX_SENTENCES)]
    thresholds = THRESHOLDS
    wide = tuple(round(0.05 + 0.01 * i, 2) for i in range(91))  # 0.05 .. 0.95: another model's scale
    if args.evidence_only:
        settings = [(base.lexical_weight, base.gap, base.same_source_bonus, base.max_sentences)]
        thresholds = wide
    elif args.joint:  # a coarser gap and bonus grid: the lexical weight multiplies it
        settings = list(itertools.product([float(x) for x in args.joint.split(",")], JOINT_GAPS, JOINT_BONUSES,
                                          MAX_SENTENCES))
        thresholds = wide
    chosen_params = {}
    for lexical, gap, bonus, most in settings:
        params = {**base.__dict__, "evidence_model": model, "threshold": -1.0, "gap": gap,
                  "same_source_bonus": bonus, "max_sentences": most, "lexical_weight": lexical}
        b = SentenceAnswerer(None, sentences, SentenceParams(**params))
        b.idf, b.idf_max = a.idf, a.idf_max
        t0 = time.perf_counter()
        rows = {k: answer_rows(b, qs) for k, qs in sets.items()}
        if args.joint:
            print(f"lexical_weight={lexical} gap={gap} bonus={bonus} sentences={most}: "
                  f"{time.perf_counter() - t0:.1f}s", flush=True)
        for t in thresholds:
            label = (f"lexical_weight={lexical}," if args.joint else "") + \
                f"gap={gap},same_source_bonus={bonus},max_sentences={most},threshold={t}"
            grid[label] = {k: at_threshold(r, t) for k, r in rows.items()}
            chosen_params[label] = {**params, "threshold": t}
    need = targets_with_margin(len(sets["eval"]), [r["tune"]["words_sd"] for r in grid.values()])
    ok = [(r["tune"]["gold"], label) for label, r in grid.items() if meets(r["tune"], need)]
    choice = max(ok)[1] if ok else None
    out["selection_targets_on_tune"] = need
    out["selection_choice"] = choice
    out["selection_choice_figures"] = grid.get(choice)
    print("chosen on tune:", choice, json.dumps(grid.get(choice)), flush=True)
    report("configured", a.p)
    if args.evidence_only or args.joint:
        if not choice:  # nothing meets every target on tune: the best balanced accuracy there
            choice = max(grid, key=lambda k: (grid[k]["tune"]["nf_unans"] + 1 - grid[k]["tune"]["nf_ans"]) / 2)
            out["selection_choice"] = {"balanced_accuracy_on_tune (no setting meets every target)": choice}
            out["selection_choice_figures"] = grid[choice]
            print("nothing meets every target on tune; best balanced accuracy:", choice,
                  json.dumps(grid[choice]), flush=True)
        if args.joint:  # the most gold spans on tune per lexical weight, at the targets
            out["best_gold_on_tune_at_targets_by_lexical_weight"] = {
                str(w): max([r["tune"]["gold"] for k, r in grid.items()
                             if k.startswith(f"lexical_weight={w},") and meets(r["tune"], need)], default=None)
                for w in sorted({x[0] for x in settings})}
        report("refit", SentenceParams(**chosen_params[choice]))
        write_json(args.results, out, default=float)
        # the grid (a joint one: about 20,000 settings, several MB) stays beside the cached retrieval
        grid_path = Path(args.out) / (Path(args.results).stem + "_grid.jsonl")
        grid_path.write_text("".join(json.dumps({"setting": k, **v}) + "\n" for k, v in grid.items()))
        ev.close()
        return
    # small-to-big (tried): the neighbouring chunks (same document, ordinal +-1) of the top
    # chunk join the answerer's context, right after it
    rows = chunk_ordinals(e)
    at = {(d, o): c for c, d, o in rows}
    pos = {c: (d, o) for c, d, o in rows}
    grown = {}
    for name, qs in sets.items():
        grown[name] = []
        for q in qs:
            q2 = dict(q)
            for key in ("head", "uhead"):
                head = list(q[key][:base.top_chunks])
                if head:
                    d, o = pos[head[0].chunk_no]
                    have = {c.chunk_no for c in head}
                    extra = [at[(d, o + k)] for k in (-1, 1) if (d, o + k) in at and at[(d, o + k)] not in have]
                    head = head[:1] + e.segments.candidates(extra) + head[1:]
                q2[key] = head
            grown[name].append(q2)
    out["small_to_big_questions_grown"] = {k: sum(len(g["head"]) > len(q["head"][:base.top_chunks])
                                                  for g, q in zip(grown[k], sets[k])) for k in sets}
    print("small-to-big: questions whose context grew", out["small_to_big_questions_grown"], flush=True)
    saved, sets = sets, grown
    report("small_to_big", SentenceParams(**{**base.__dict__, "top_chunks": base.top_chunks + 2}))
    sets = saved
    out["selection"] = selection_experiment(a, sets)
    print("selection", json.dumps(out["selection"]), flush=True)
    write_json(args.results, out, default=float)
    # the whole grid, a setting a line, beside the cached retrieval (out/, not committed)
    Path(args.out, Path(args.results).stem + "_grid.jsonl").write_text(
        "".join(json.dumps({"setting": k, **v}) + "\n" for k, v in grid.items()))
    ev.close()


if __name__ == "__main__":
    main()
