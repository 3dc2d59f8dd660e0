"""Late-chunked against separately embedded sentence vectors, per embedding model, on SQuAD.

    RAGBEAM__EMBED__PROFILE=<profile> python -m bench.studies.sentvec_per_model \
        --index out/eval-<profile>/squad/index --out out/sentvec-<profile> \
        --results bench/results/sentvec_per_model-<profile>.jsonl

A sentence has no [CLS] row of its own, so late-chunked sentence vectors are the mean of the
token states over its span whatever the model's pooling; for a model trained for [CLS] pooling
(bge-small) that may be a weaker sentence vector than embedding the sentence alone. Both kinds
answer the same retrieved candidates with the profile's own selection (the configured
SentenceParams), nothing refused (threshold off, no evidence model), so only the sentence
vectors differ; the lexical weight and the sentence count are varied. Questions: the first
--tune-n of the tune sample and the 500 eval questions (bench/studies/devsets.py).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os

import numpy as np

from bench.studies.answer_variants import build_sentence_vectors, cached_sets, score_set
from bench.studies.devsets import DATA_ROOT, squad_samples


def main(argv=None) -> None:
    from configs.schema import load_config
    from transforms.evaluation.datasets import DocLabels, load_dataset
    from transforms.evaluation.evaluator import Evaluator
    from transforms.index.publish import resolve_index
    from transforms.ingest.sentvec import SentenceStore
    from transforms.query.extract import SentenceAnswerer

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--index", default="out/eval/squad/index")
    ap.add_argument("--dataset", default=str(DATA_ROOT / "squad-dev-half"))
    ap.add_argument("--out", default="out/sentvec_per_model")
    ap.add_argument("--results", default="")
    ap.add_argument("--tune-n", type=int, default=1000)
    ap.add_argument("--lexical", default="0.15,0.3,0.7")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    cfg = load_config(None)
    vdir = resolve_index(args.index)
    ds = load_dataset(args.dataset)
    eval_ids, tune_ids = squad_samples(ds)
    tune_ids = tune_ids[:args.tune_n]
    ev = Evaluator(vdir, cfg)
    labels = DocLabels(vdir, {d for q in eval_ids + tune_ids for d in ds.qrels[q]})
    sets = cached_sets(ev, ds, tune_ids, eval_ids, labels, os.path.join(args.out, f"sets-{args.tune_n}.pkl"))
    base = ev.engine.answerer.p  # the profile's selection as the answer job runs it
    rows = []
    for kind in ("late", "separate"):
        spans, vecs, _, _ = build_sentence_vectors(ev, kind, args.out)
        store = SentenceStore.from_lists(spans, vecs, dtype=np.int8)  # stored as the index stores them
        for lw in sorted({float(x) for x in args.lexical.split(",")} | {base.lexical_weight}):
            for ms in (2, 3):
                p = dataclasses.replace(base, lexical_weight=lw, max_sentences=ms, evidence_model=None,
                                        threshold=float("-inf"))
                answerer = SentenceAnswerer(None, store, p)
                row = {"profile": cfg.embed.profile or "minilm", "kind": kind, "lexical_weight": lw, "max_sentences": ms}
                for name, qs in sets.items():
                    r = score_set(answerer, qs)
                    row.update({f"{name}.{k}": round(v, 4) for k, v in r.items()
                                if k in ("gold", "words", "cit_prec", "sents")})
                rows.append(row)
                print(json.dumps(row), flush=True)
    ev.close()
    if args.results:
        with open(args.results, "w", encoding="utf-8") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)


if __name__ == "__main__":
    main()
