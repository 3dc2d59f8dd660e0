"""What the LLM features do on a dev set, with the real local model (SmolLM2-135M on llama-server).

    python -m bench.studies.llm_features [--data ../shared/data] [--set cranfield]
        [--kinds none,multi_query,hyde] [--max-queries 0] [--judge-set squad-dev-half --judge 100]

- Query rewriting: `ragbeam eval` on the set with rewrite.kind none, multi_query (n 3) and hyde,
  on one index (built once under out/llm_features/<set>/index): nDCG@10 per stage, and the llm's
  time and tokens per question.
- The judge (with --judge N): faithfulness and answer relevance of the default extractive
  answers on N answered questions of --judge-set, by the same model.

Writes bench/results/llm_features.{json,md}. The model is the packaged 135M one: the figures say
what these features cost and do with it, not what a strong model would do.
"""
from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STAGES = ("bm25", "dense", "hybrid", "final")


def _cfg(base_url: str, **sections):
    from configs.schema import load_config
    from infra.llm import server as llm
    cfg = load_config(environ={})
    update = {"llm": cfg.llm.model_copy(update={"base_url": base_url, "model": llm.MODEL_NAME, "concurrency": 2,
                                                 "timeout_s": 300})}
    for name, values in sections.items():
        update[name] = values if not isinstance(values, dict) else getattr(cfg, name).model_copy(update=values)
    return cfg.model_copy(update=update)


def _tokens(server) -> dict:
    m = server.metrics()
    return {"prompt": m.get("llamacpp:prompt_tokens_total", 0), "predicted": m.get("llamacpp:tokens_predicted_total", 0)}


def main() -> None:
    from configs.schema import JudgeConfig
    from infra.llm import server as llm
    from pipelines.eval import run_eval
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    ap.add_argument("--set", default="cranfield")
    ap.add_argument("--kinds", default="none,multi_query,hyde")
    ap.add_argument("--max-queries", type=int, default=0, help="0: every judged query")
    ap.add_argument("--judge-set", default="squad-dev-half")
    ap.add_argument("--judge", type=int, default=0, help="answers to judge (0: no judge run)")
    ap.add_argument("--threads", type=int, default=1, help="llama-server threads")
    ap.add_argument("--out", default=str(ROOT / "out" / "llm_features"))
    a = ap.parse_args()
    out = Path(a.out)
    res = ROOT / "bench" / "results"
    rows: dict = {"set": a.set, "model": llm.MODEL_NAME, "rewrite": {}}
    if (res / "llm_features.json").exists():  # a run of only some parts keeps the others' rows
        rows.update(json.loads((res / "llm_features.json").read_text()))
    rows["measured"] = time.strftime("%Y-%m-%d %H:%M")
    command = "python -m bench.studies.llm_features " + " ".join(shlex.quote(x) for x in sys.argv[1:])
    rows.setdefault("rewrite_command", "python -m bench.studies.llm_features --judge 100")  # the first run's
    server = llm.start(parallel=2, threads=a.threads, ctx_per_slot=2048, log_dir=str(out / "llm"))
    try:
        kinds = [k for k in a.kinds.split(",") if k]
        if kinds:
            rows["rewrite_command"] = command
        for kind in kinds:
            cfg = _cfg(server.base_url, rewrite={"kind": kind, "n": 3, "max_tokens": 96})
            t0, tok0 = time.monotonic(), _tokens(server)
            report = run_eval(cfg, str(Path(a.data) / a.set), str(out / a.set / kind), index=None
                              if kind == kinds[0] else str(out / a.set / kinds[0] / "index"),
                              max_queries=a.max_queries or None, unanswerable=False, log=print)
            tok1, n = _tokens(server), report["counts"]["queries_evaluated"]
            rows["rewrite"][kind] = {
                "queries": n, **{f"{s} ndcg@10": round(report["stages"][s]["ndcg@10"], 4) for s in STAGES},
                "s_per_query": round((time.monotonic() - t0) / max(1, n), 3),
                "prompt_tokens_per_query": round((tok1["prompt"] - tok0["prompt"]) / max(1, n), 1),
                "generated_tokens_per_query": round((tok1["predicted"] - tok0["predicted"]) / max(1, n), 1)}
            print(kind, rows["rewrite"][kind])
        if a.judge:
            cfg = _cfg(server.base_url, judge=JudgeConfig(max_questions=a.judge))
            t0 = time.monotonic()
            report = run_eval(cfg, str(Path(a.data) / a.judge_set), str(out / a.judge_set), max_queries=a.judge,
                              unanswerable=False, log=print)
            rows["judge_command"] = command
            rows["judge"] = {"set": a.judge_set, **report["judge"], "gold_span_in_answer":
                             report.get("answers", {}).get("gold_span_in_answer"),
                             "citation_precision": report["triage"]["citation_precision"],
                             "s": round(time.monotonic() - t0, 1)}
            print("judge", rows["judge"])
    finally:
        server.stop()
    (res / "llm_features.json").write_text(json.dumps(rows, indent=2) + "\n")
    lines = [f"# LLM features on {a.set} with {rows['model']} ({rows['measured']})", "",
             f"Rewriting: `{rows['rewrite_command']}`" + (f"; the judge: `{rows['judge_command']}`"
                                                          if rows.get("judge_command") else "") + ".", "",
             "| rewrite.kind | queries | " + " | ".join(f"{s} nDCG@10" for s in STAGES)
             + " | s/query | prompt tokens/q | generated tokens/q |",
             "|---" * (len(STAGES) + 5) + "|"]
    for kind, r in rows["rewrite"].items():
        lines.append(f"| {kind} | {r['queries']} | " + " | ".join(f"{r[f'{s} ndcg@10']:.3f}" for s in STAGES)
                     + f" | {r['s_per_query']} | {r['prompt_tokens_per_query']} | {r['generated_tokens_per_query']} |")
    if "judge" in rows:
        j = rows["judge"]
        c = j.get("controls", {})
        lines += ["", f"Judge on {j['set']} ({j['answers_judged']} extractive answers, {j['claims_judged']} claims, "
                      f"prompts {', '.join(j['prompt_versions'].values())}): faithfulness {j['faithfulness']}, "
                      f"answer relevance {j['answer_relevance']}, unparsed {j['unparsed_verdicts']}; control claims "
                      f"right {c.get('right')} of {c.get('judged')} (on supported {c.get('right_on_supported')}, on "
                      f"unsupported {c.get('right_on_unsupported')}), reliable {j.get('reliable')}; gold span in "
                      f"answer {j['gold_span_in_answer']}, citation precision {j['citation_precision']}."]
    (res / "llm_features.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
