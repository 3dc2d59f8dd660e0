"""Contextual chunks written by the local LLM against the title-path prefix, on a Cranfield subset.

    python -m bench.studies.llm_contexts [--data ../shared/data] [--queries 40] [--docs 300]
        [--doc-chars 1500] [--threads 2]

Writing a context costs the 135M model a few seconds a chunk on this machine, so the whole
collection (2,082 chunks) is out of reach here; the study takes a seeded sample of queries,
every document judged for them, and seeded distractors up to --docs documents, writes that
subset in BEIR layout under out/llm_contexts/, and indexes it twice with the same chunking
(chunk.context_tokens 54 for both): contextualize.kind title_path (the default) and llm. Then
`ragbeam eval` on both, and a second llm index run on the same corpus in a fresh index that
shares the first one's context cache, to show what the cache saves.

Writes bench/results/llm_contexts.{json,md}.
"""
from __future__ import annotations

import argparse
import json
import random
import shutil
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STAGES = ("bm25", "dense", "hybrid", "final")


def write_subset(src: Path, dst: Path, n_queries: int, n_docs: int, seed: int = 0) -> dict:
    from transforms.evaluation.datasets import sample_ids
    queries = {json.loads(x)["_id"]: json.loads(x)["text"] for x in open(src / "queries.jsonl", encoding="utf-8")}
    qrels: dict = {}
    for line in list(open(src / "qrels" / "test.tsv", encoding="utf-8"))[1:]:
        q, d, g = line.rstrip("\n").split("\t")
        qrels.setdefault(q, {})[d] = int(g)
    picked = sample_ids([q for q in queries if q in qrels and any(g > 0 for g in qrels[q].values())], n_queries, seed)
    corpus = [json.loads(x) for x in open(src / "corpus.jsonl", encoding="utf-8")]
    judged = {d for q in picked for d, g in qrels[q].items() if g > 0}
    rest = sorted(d["_id"] for d in corpus if d["_id"] not in judged)
    keep = judged | set(random.Random(seed).sample(rest, max(0, n_docs - len(judged))))
    (dst / "qrels").mkdir(parents=True, exist_ok=True)
    with open(dst / "corpus.jsonl", "w", encoding="utf-8") as f:
        f.writelines(json.dumps(d) + "\n" for d in corpus if d["_id"] in keep)
    with open(dst / "queries.jsonl", "w", encoding="utf-8") as f:
        f.writelines(json.dumps({"_id": q, "text": queries[q]}) + "\n" for q in picked)
    with open(dst / "qrels" / "test.tsv", "w", encoding="utf-8") as f:
        f.write("query-id\tcorpus-id\tscore\n")
        f.writelines(f"{q}\t{d}\t{g}\n" for q in picked for d, g in qrels[q].items() if d in keep)
    return {"queries": len(picked), "documents": len(keep), "judged_documents": len(judged)}


def main() -> None:
    from configs.schema import load_config
    from infra.llm import server as llm
    from pipelines.eval import run_eval
    from pipelines.index import run_index
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    ap.add_argument("--queries", type=int, default=40)
    ap.add_argument("--docs", type=int, default=300)
    ap.add_argument("--doc-chars", type=int, default=1500, help="contextualize.doc_chars")
    ap.add_argument("--threads", type=int, default=2, help="llama-server threads (2: the machine otherwise idle)")
    ap.add_argument("--out", default=str(ROOT / "out" / "llm_contexts"))
    a = ap.parse_args()
    out = Path(a.out)
    shutil.rmtree(out, ignore_errors=True)
    subset = out / "cranfield-subset"
    rows = {"subset": write_subset(Path(a.data) / "cranfield", subset, a.queries, a.docs),
            "model": llm.MODEL_NAME, "measured": time.strftime("%Y-%m-%d %H:%M"), "runs": {}}
    server = llm.start(parallel=2, threads=a.threads, ctx_per_slot=2048, log_dir=str(out / "llm"))
    try:
        base = load_config(environ={})
        for kind in ("title_path", "llm"):
            cfg = base.model_copy(update={
                "chunk": base.chunk.model_copy(update={"context_tokens": 54}),
                "contextualize": base.contextualize.model_copy(update={"kind": kind, "max_tokens": 48,
                                                                       "doc_chars": a.doc_chars}),
                "llm": base.llm.model_copy(update={"base_url": server.base_url, "model": llm.MODEL_NAME,
                                                   "concurrency": 2, "timeout_s": 300})})
            index = out / kind / "index"
            summary = run_index(cfg, str(subset / "corpus.jsonl"), str(index), progress=False, log=print)
            report = run_eval(cfg, str(subset), str(out / kind), index=str(index), unanswerable=False, log=print)
            rows["runs"][kind] = {"chunks": summary["chunks"], "index_s": summary["wall_s"],
                                  "llm_contexts_written": summary.get("llm_contexts_written"),
                                  "llm_contexts_failed": summary.get("llm_contexts_failed"),
                                  **{f"{s} ndcg@10": round(report["stages"][s]["ndcg@10"], 4) for s in STAGES}}
            print(kind, rows["runs"][kind])
            if kind == "llm":  # the same corpus into a fresh index with the first one's cache
                again = out / "llm-again" / "index"
                shutil.copytree(index / "cache", again / "cache")
                s2 = run_index(cfg, str(subset / "corpus.jsonl"), str(again), progress=False, log=print)
                rows["runs"]["llm, cache warm"] = {"chunks": s2["chunks"], "index_s": s2["wall_s"],
                                                   "llm_contexts_written": s2.get("llm_contexts_written")}
    finally:
        server.stop()
    res = ROOT / "bench" / "results"
    (res / "llm_contexts.json").write_text(json.dumps(rows, indent=2) + "\n")
    sub = rows["subset"]
    lines = [f"# Contextual chunks on a Cranfield subset with {rows['model']} ({rows['measured']})", "",
             f"`python -m bench.studies.llm_contexts --queries {a.queries} --docs {a.docs} --doc-chars {a.doc_chars} "
             f"--threads {a.threads}`: {sub['queries']} "
             f"queries, {sub['documents']} documents ({sub['judged_documents']} judged relevant).", "",
             "| contextualize.kind | chunks | index s | llm contexts written | "
             + " | ".join(f"{s} nDCG@10" for s in STAGES) + " |", "|---" * (len(STAGES) + 4) + "|"]
    for kind, r in rows["runs"].items():
        lines.append(f"| {kind} | {r['chunks']} | {r['index_s']} | {r.get('llm_contexts_written') or 0} | "
                     + " | ".join(f"{r[f'{s} ndcg@10']:.3f}" if f"{s} ndcg@10" in r else "" for s in STAGES) + " |")
    (res / "llm_contexts.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
