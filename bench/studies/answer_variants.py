"""Sentence vectors at index time (late chunking vs separate) and extractive selection, on SQuAD.

    python -m bench.studies.answer_variants --index out/eval/squad/index [--dataset ../shared/data/squad-dev-half]

Retrieval runs once per question (normally, and again with the question's whole article
hidden, as `ragbeam eval` does); then every (sentence-vector kind, storage type, answerer
setting) answers the same candidates, with no model call. Two disjoint question samples:
"tune" (seed 1, 500 questions not in the eval sample) picks settings, "eval" (the 500 of
`ragbeam eval --max-queries 500`, seed 0) reports them.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import pickle
import time

import numpy as np

from bench.studies.devsets import DATA_ROOT, squad_samples
from transforms.evaluation.datasets import DocLabels, load_dataset
from transforms.evaluation.evaluator import BATCH, Evaluator, unanswerable_masks
from transforms.evaluation import metrics as M
from transforms.query.cite import strip_markers


def build_sentence_vectors(ev: Evaluator, kind: str, cache_dir: str):
    """Per chunk_no: (spans, vectors float32) for `kind`, and the chunks/s it took. Every chunk
    number of the version gets its row (a tombstoned one too: the store is indexed by number)."""
    from transforms.ingest.sentvec import chunk_sentence_vectors
    path = os.path.join(cache_dir, f"sentvec-{kind}.npz")
    con = ev.engine.con
    rows = con.execute("SELECT context, text FROM chunks ORDER BY chunk_no").fetchall()
    texts = [r[1] or "" for r in rows]
    embed_texts = [f"{c}\n{t}" if c else t for c, t in rows]
    if os.path.exists(path):
        z = np.load(path, allow_pickle=True)
        return list(z["spans"]), list(z["vecs"]), float(z["rate"]), float(z["base_rate"])
    emb = ev.engine.embedder
    # (index-time cost: the retired sentvec_cost study, docs/benchmarks.md "Retired studies")
    t = time.perf_counter()
    chunk, spans, vecs = chunk_sentence_vectors(emb, embed_texts, texts, kind=kind)
    s = time.perf_counter() - t
    np.savez(path, spans=np.array(spans, dtype=object), vecs=np.array(vecs, dtype=object),
             rate=len(texts) / s, base_rate=float("nan"))
    print(f"{kind}: {len(texts)} chunks in {s:.0f}s", flush=True)
    return spans, vecs, len(texts) / s, float("nan")


def collect(ev: Evaluator, ds, ids: list[str], labels: DocLabels):
    """Per question: text, qvec, head (normal), head (article hidden), relevant doc ids, answers."""
    out = []
    for i in range(0, len(ids), BATCH):
        batch = ids[i:i + BATCH]
        texts = [ds.queries[q] for q in batch]
        e = ev.engine
        qv = e.embedder.encode_queries(texts)
        golds = [set(M.relevant(ds.qrels[q])) for q in batch]
        heads = {}
        for key, allowed in (("head", ev.public), ("uhead", unanswerable_masks(ev, labels, golds))):
            cands = e.candidates(e.search(texts, allowed, qv))  # the engine's own first stage
            heads[key] = e.reranker.rerank(texts, [c[:ev.cfg.rerank.top_n] for c in cands],
                                           cache=e.sentence_vectors)
        for j, q in enumerate(batch):
            rel = M.relevant(labels.doc_qrels(ds.qrels[q]))
            out.append({"id": q, "text": texts[j], "qv": qv[j], "head": heads["head"][j],
                        "uhead": heads["uhead"][j], "rel": rel, "answers": ds.answers.get(q, [])})
    return out


def cached_sets(ev: Evaluator, ds, tune_ids: list[str], eval_ids: list[str], labels: DocLabels, pkl: str) -> dict:
    """{"tune": collect(...), "eval": collect(...)}, kept in `pkl` so a rerun retrieves nothing."""
    if os.path.exists(pkl):
        with open(pkl, "rb") as f:
            return pickle.load(f)
    sets = {"tune": collect(ev, ds, tune_ids, labels), "eval": collect(ev, ds, eval_ids, labels)}
    with open(pkl, "wb") as f:
        pickle.dump(sets, f)
    return sets


def answer_rows(answerer, qs) -> list[dict]:
    """Per question: the answer with normal retrieval (status, evidence, gold span, words,
    sentences, citation precision) and the status and evidence with its article hidden."""
    qv = np.stack([q["qv"] for q in qs])
    res = answerer.answer([q["text"] for q in qs], [q["head"] for q in qs], qvecs=qv)
    ures = answerer.answer([q["text"] for q in qs], [q["uhead"] for q in qs], qvecs=qv)
    rows = []
    for q, r, u in zip(qs, res, ures):
        rows.append({"status": r.status, "evidence": r.evidence_score,
                     "u_status": u.status, "u_evidence": u.evidence_score,
                     "gold": r.status == "answered" and M.contains_span(r.answer, q["answers"]),
                     "words": len(strip_markers(r.answer).split()), "sents": r.answer.count("[") or 1,
                     "cit_prec": M.citation_precision([c["doc_id"] for c in r.citations], q["rel"])})
    return rows


def score_set(answerer, qs) -> dict:
    rows = answer_rows(answerer, qs)
    answered = [x for x in rows if x["status"] == "answered"]
    evid, uevid = [x["evidence"] for x in rows], [x["u_evidence"] for x in rows]
    return {"gold": M.mean(x["gold"] for x in rows), "words": M.mean(x["words"] for x in answered),
            "cit_prec": M.mean(x["cit_prec"] for x in rows if x["cit_prec"] is not None),
            "nf_ans": M.mean(x["status"] == "not_found" for x in rows),
            "nf_unans": M.mean(x["u_status"] == "not_found" for x in rows),
            "sents": M.mean(x["sents"] for x in answered), "auc": M.auc(evid, uevid),
            "_evid": evid, "_uevid": uevid}


def main(argv=None) -> None:
    from configs.schema import load_config
    from transforms.query.extract import SentenceAnswerer, SentenceParams
    from transforms.index.publish import resolve_index
    from transforms.ingest.sentvec import SentenceStore
    from bench.studies.segview import live_texts

    ap = argparse.ArgumentParser()
    ap.add_argument("--index", default="out/eval/squad/index")
    ap.add_argument("--dataset", default=str(DATA_ROOT / "squad-dev-half"))
    ap.add_argument("--out", default="out/bench/answer_variants")
    ap.add_argument("--grid", default="vectors")
    ap.add_argument("--kinds", default="late,separate")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    cfg = load_config(None)
    vdir = resolve_index(args.index)
    ds = load_dataset(args.dataset)
    eval_ids, tune_ids = squad_samples(ds)
    ev = Evaluator(vdir, cfg)
    labels = DocLabels(vdir, {d for q in eval_ids + tune_ids for d in ds.qrels[q]})
    t = time.perf_counter()
    sets = cached_sets(ev, ds, tune_ids, eval_ids, labels, os.path.join(args.out, f"sets-{os.path.basename(vdir)}.pkl"))
    print(f"retrieval for {len(tune_ids) + len(eval_ids)} questions x2: {time.perf_counter() - t:.1f}s", flush=True)

    stores, costs = {}, {}
    kinds = args.kinds.split(",")
    for kind in kinds:
        spans, vecs, rate, base_rate = build_sentence_vectors(ev, kind, args.out)
        costs[kind] = {"chunks_per_s": rate, "baseline_chunks_per_s": base_rate,
                       "sentences": int(sum(len(s) for s in spans))}
        for dt in ("float32", "float16", "int8"):
            st = SentenceStore.from_lists(spans, vecs, dtype=getattr(np, dt))
            stores[(kind, dt)] = st
            costs[kind][f"bytes_{dt}"] = st.vec.nbytes
    print(json.dumps(costs, indent=1), flush=True)
    results = []


    idf_texts = live_texts(ev.engine)  # the live chunks' texts (the artifact's chunks.text)

    def run(kind, dt, idf=False, **kw):
        a = SentenceAnswerer(None, stores[(kind, dt)], SentenceParams(**kw))
        if idf:
            a.set_idf(idf_texts)
        row = {"kind": kind, "dtype": dt, "idf": idf, **kw}
        for name, qs in sets.items():
            r = score_set(a, qs)
            row.update({f"{name}.{k}": v for k, v in r.items() if not k.startswith("_")})
            if name == "tune":  # the threshold that holds not-found on answerable at 4% on tune
                ev_sorted = np.sort(r["_evid"])
                thr = row["tune.thr_4pct"] = float(ev_sorted[int(0.04 * len(ev_sorted))])
            else:  # what that threshold does on the eval questions
                row["eval.nf_ans@thr"] = M.mean(e < thr for e in r["_evid"])
                row["eval.nf_unans@thr"] = M.mean(e < thr for e in r["_uevid"])
        results.append(row)
        print(json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items()}), flush=True)
        return row

    if args.grid == "vectors":  # today's selection (margin 0.12, 3 sentences, lexical 0.15) on each kind/dtype
        for kind, dt in itertools.product(kinds, ("float32", "float16", "int8")):
            run(kind, dt)
    else:  # a JSON list of settings: {"kind": ..., "dtype": ..., "idf": ..., SentenceParams fields}
        for spec in json.loads(args.grid):
            run(**spec)
    with open(os.path.join(args.out, "results.jsonl"), "a") as f:
        for r in results:
            f.write(json.dumps(r) + "\n")
    ev.close()


if __name__ == "__main__":
    main()
