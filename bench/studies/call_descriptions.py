"""A call question's descriptions scored by their late-chunked or their own vectors, on the demo.

    python -m bench.studies.call_descriptions [--index out/index] \
        [--results bench/results/call_descriptions.jsonl]

Answers samples/questions.jsonl on an index of samples/corpus (`make run`'s out/index, built
here when missing) with `answer.call_definitions_alone` 0 (late-chunked vectors only) and the
default, and `answer.call_chunks` 20 and the default: per setting, the answers that hold their
`expect`, each call question's answer, and the answer time per call question with an empty
sentence cache (best of 5, so the descriptions embedded alone are paid for every time).
"""
from __future__ import annotations

import argparse
import json
import os
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main(argv=None) -> None:
    from configs.schema import load_config
    from transforms.index.publish import resolve_index
    from transforms.ingest.embed import model_spec_from_config
    from transforms.query.engine import QAEngine
    from transforms.query.extract import question_form
    from transforms.query.questions import read_questions

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--index", default=os.path.join(ROOT, "out", "index"))
    ap.add_argument("--results", default="")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    cfg = load_config(None)
    if not os.path.exists(os.path.join(args.index, "CURRENT")):
        from pipelines.index import run_index
        run_index(cfg, os.path.join(ROOT, "samples", "corpus"), args.index, progress=False, log=lambda *_: None)
    engine = QAEngine(resolve_index(args.index), cfg, model_spec_from_config(cfg))
    questions = list(read_questions(os.path.join(ROOT, "samples", "questions.jsonl")))
    calls = [q for q in questions if question_form(q.question) == "call"]
    p = engine.answerer.p
    default = (p.call_definitions_alone, p.call_chunks)
    rows = []
    for alone, chunks in sorted({(0, 20), (0, default[1]), default}):
        p.call_definitions_alone, p.call_chunks = alone, chunks
        recs = engine.answer_batch(questions, top_k=10)
        held = [q.id for q, r in zip(questions, recs) if q.metadata["expect"].lower() in r.answer.lower()]
        best = float("inf")
        for _ in range(args.repeats):
            engine.sentence_vectors._vec.clear()  # every run embeds its descriptions again
            t = time.perf_counter()
            engine.answer_batch(calls, top_k=10)
            best = min(best, time.perf_counter() - t)
        row = {"call_definitions_alone": alone, "call_chunks": chunks, "default": (alone, chunks) == default,
               "expect_held": len(held), "questions": len(questions),
               "missed": [q.id for q in questions if q.id not in held],
               "ms_per_call_question": round(best * 1000 / len(calls), 1), "call_questions": len(calls),
               "call_answers": {q.id: r.answer for q, r in zip(questions, recs) if q in calls}}
        rows.append(row)
        print(f"call_definitions_alone {alone:3d}  call_chunks {chunks:3d}  expect held {len(held)}/{len(questions)}"
              f"  missed {row['missed']}  {row['ms_per_call_question']} ms per call question")
    engine.close()
    if args.results:
        with open(args.results, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)


if __name__ == "__main__":
    main()
