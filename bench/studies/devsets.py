"""The dev sets in ../shared/data as the studies open them: the same query samples
`ragbeam eval --max-queries` draws, on the indexes `python -m bench.eval_all` built."""
from __future__ import annotations

import os

from bench.data import SHARED_DATA

DATA_ROOT = SHARED_DATA
# report name -> (folder under DATA_ROOT, seeded query sample size or None for all)
DEV_SETS = {"cranfield": ("cranfield", None), "vaswani": ("vaswani-npl", None),
            "msmarco": ("msmarco-trecdl19-subset", None), "squad": ("squad-dev-half", 500),
            "debian-docs": ("debian-docs", 300)}


def open_dev_set(index_dir: str, folder: str, max_queries, cfg):
    """(Evaluator on the index's live version, query ids, their qrels in doc-id space, texts):
    the sample `ragbeam eval --max-queries` draws (seed 0)."""
    from transforms.evaluation.datasets import DocLabels, load_dataset, sample_ids
    from transforms.evaluation.evaluator import Evaluator
    from transforms.index.publish import resolve_index

    vdir = resolve_index(index_dir)
    ds = load_dataset(folder)
    ids = sample_ids(ds.queries, max_queries, 0)
    labels = DocLabels(vdir, {d for q in ids for d in ds.qrels[q]})
    return Evaluator(vdir, cfg), ids, [labels.doc_qrels(ds.qrels[q]) for q in ids], [ds.queries[q] for q in ids]


def add_dev_set_args(ap, sets: str, out: str) -> None:
    """The arguments every per-dev-set bench takes: which sets, where their indexes and data are."""
    ap.add_argument("--sets", default=sets)
    ap.add_argument("--root", default="out/eval", help="ROOT/<set>/index: the indexes `bench.eval_all` built")
    ap.add_argument("--data", default=str(DATA_ROOT))
    ap.add_argument("--out", default=out)


def iter_dev_sets(args, cfg, sets: dict = DEV_SETS):
    """(name, Evaluator, query ids, qrels, texts) per set named in args.sets (open_dev_set)."""
    for name in args.sets.split(","):
        folder, max_queries = sets[name]
        yield (name, *open_dev_set(os.path.join(args.root, name, "index"), os.path.join(args.data, folder),
                                   max_queries, cfg))


def squad_samples(ds, tune_size: int | None = 500) -> tuple[list[str], list[str]]:
    """(eval, tune): the 500 questions `ragbeam eval --max-queries 500` scores (seed 0), and
    `tune_size` others (seed 1; None: all others) that settings are chosen on."""
    from transforms.evaluation.datasets import sample_ids

    eval_ids = sample_ids(ds.queries, 500, 0)
    rest = sorted(set(ds.queries) - set(eval_ids))
    return eval_ids, (rest if tune_size is None else sample_ids(rest, tune_size, 1))


def append_rows(path: str, rows: list[dict]) -> None:
    """A study's result rows appended to its JSONL file (one line a variant per set)."""
    import json
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "a") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
