"""Does a segmented index answer like one built whole, on a real dev set?

python -m bench.studies.segment_equality [--data ../shared/data/cranfield] [--work out/segment-equality]
                                         [--out bench/results/segment_equality.json]

Indexes the dev set's corpus once (the real pipeline), copies the index and rebuilds the copies'
segments from the same shards in 3 and 7 segments (`ragbeam build-artifacts`), then runs every
query through each: the first stage 200 deep (dense, BM25 and fused lists: chunk ids and scores,
and the BM25 bound) and the whole answer job's record (answer, citations, retrieved chunks and
documents with scores). Writes the largest score difference and whether every list and answer is
the same. tests/test_segments.py checks the same on the mini corpus, with access groups and filters.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _flat(x, out, path=""):
    """Leaves of a record: (path, value), floats apart so they can be compared within a tolerance."""
    if isinstance(x, dict):
        for k in sorted(x):
            _flat(x[k], out, f"{path}.{k}")
    elif isinstance(x, (list, tuple)):
        out.append((path + "#len", len(x)))
        for i, v in enumerate(x):
            _flat(v, out, f"{path}[{i}]")
    else:
        out.append((path, x))
    return out


def compare(a, b) -> tuple[bool, float]:
    """(all non-float leaves equal, largest float difference)."""
    fa, fb = _flat(a, []), _flat(b, [])
    if [p for p, _ in fa] != [p for p, _ in fb]:
        return False, float("inf")
    same, diff = True, 0.0
    for (_, x), (_, y) in zip(fa, fb):
        if isinstance(x, float) or isinstance(y, float):
            diff = max(diff, abs(float(x) - float(y)))
        elif x != y:
            same = False
    return same, diff


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.studies.segment_equality", description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=os.path.join(ROOT, "..", "shared", "data", "cranfield"))
    ap.add_argument("--work", default=os.path.join(ROOT, "out", "segment-equality"))
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "segment_equality.json"))
    a = ap.parse_args(argv)
    from bench.data import load_beir, write_corpus
    from configs.schema import load_config
    from pipelines.index import run_index
    from pipelines.segments import rebuild_segments
    from transforms.index.publish import resolve_index
    from transforms.ingest.embed import model_spec_from_config
    from transforms.query.engine import QAEngine
    from transforms.query.records import Question

    name = os.path.basename(os.path.normpath(a.data))
    from pathlib import Path
    ds = load_beir(Path(a.data), name)
    os.makedirs(a.work, exist_ok=True)
    cfg = load_config(environ={})
    one = os.path.join(a.work, "seg1")
    if not os.path.exists(os.path.join(one, "CURRENT")):
        corpus = write_corpus(ds.docs, os.path.join(a.work, "corpus"))
        run_index(cfg, corpus, one, progress=False, log=lambda *_: None)
    with open(os.path.join(resolve_index(one), "manifest.json"), encoding="utf-8") as f:
        n = sum(s["live"] for s in json.load(f)["segments"])
    dirs = {1: (one, cfg)}
    for k in (3, 7):
        d = os.path.join(a.work, f"seg{k}")
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(one, d)
        kcfg = load_config(environ={"RAGBEAM__INDEX__SEGMENT_MAX_CHUNKS": str(math.ceil(n / k))})
        rebuild_segments(kcfg, d)
        dirs[k] = (d, kcfg)
    qs = [Question(str(q["id"]), q["question"]) for q in ds.questions]
    got = {}
    for k, (d, kcfg) in dirs.items():
        e = QAEngine(resolve_index(d), kcfg, model_spec_from_config(kcfg))
        try:
            lists, records = [], []
            for lo in range(0, len(qs), 64):
                batch = qs[lo:lo + 64]
                rs = e.search([q.question for q in batch], dense_n=200, bm25_n=200)
                nos = sorted({c for r in rs for name_ in ("dense", "bm25", "fused") for c, _ in getattr(r, name_)})
                ids = dict(zip(nos, e.segments.column("chunk_id", nos)))
                lists += [{nm: [[ids[c], s] for c, s in getattr(r, nm)] for nm in ("dense", "bm25", "fused")}
                          | {"bound": r.bm25_bound} for r in rs]
                for rec in e.run(batch, 10):
                    row = rec.to_row()
                    row.pop("index_version", None)
                    records.append(row)
            got[k] = {"lists": lists, "records": records, "segments": len(e.searchers)}
        finally:
            e.close()
        print(f"{name}: {got[k]['segments']} segment(s) done", flush=True)
    out = {"dataset": name, "chunks": n, "questions": len(qs), "first_stage_depth": 200, "runs": []}
    for k in (3, 7):
        same_l, diff_l = compare(got[1]["lists"], got[k]["lists"])
        same_r, diff_r = compare(got[1]["records"], got[k]["records"])
        out["runs"].append({"segments": got[k]["segments"], "lists_equal": same_l, "lists_max_score_diff": diff_l,
                            "records_equal": same_r, "records_max_score_diff": diff_r})
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1)
    print(json.dumps(out))
    ok = all(r["lists_equal"] and r["records_equal"] and max(r["lists_max_score_diff"], r["records_max_score_diff"]) <= 1e-6
             for r in out["runs"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
