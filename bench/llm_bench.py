"""9. Bulk answering with a generator: the answer job against llama-server, beside the server's own rate.

The baseline is a bare loop that sends the job's own prompts (the same questions' top sources,
built by transforms.query.answer.build_prompt) to the same server at the same concurrency: what
the server gives when nothing else runs. The job's questions/s over that rate says whether the
job keeps the server's slots busy (target >= 0.8x). The server is restarted between the two runs
so neither finds the other's prompts in its KV cache. Prompt tokens per question come from the
server's own counters (/metrics).
"""
from __future__ import annotations

import json
import os
import time
from concurrent.futures import ThreadPoolExecutor

from bench.table import Figure, Report

SECTION = "9. Answering with a local LLM (llama-server, SmolLM2-135M)"


def _llm_config(cfg, base_url: str, concurrency: int):
    from infra.llm.server import MODEL_NAME
    a = cfg.answer.model_copy(update={"kind": "openai", "base_url": base_url, "model": MODEL_NAME,
                                      "top_chunks": 2, "max_source_chars": 800, "max_tokens": 64,
                                      "concurrency": concurrency, "timeout_s": 300, "retries": 0,
                                      "budget_s": None})
    return cfg.model_copy(update={"answer": a})


class _PromptRecorder:
    """A chat client that keeps the prompts it is sent and answers none of them."""

    def __init__(self):
        self.prompts: list[tuple[str, str]] = []

    def complete(self, system: str, user: str) -> str:
        from transforms.query.answer import GENERATOR_NOT_FOUND
        self.prompts.append((system, user))  # list.append is atomic: the answerer's threads share it
        return GENERATOR_NOT_FOUND


def _prompts(cfg, version_dir: str, questions: list[str]) -> list[tuple[str, str]]:
    """The (system, user) prompts the job sends for these questions (the same engine, in process)."""
    from transforms.ingest.embed import model_spec_from_config
    from transforms.query.engine import QAEngine
    from transforms.query.records import Question
    e = QAEngine(version_dir, cfg, model_spec_from_config(cfg))
    try:
        e.answerer.client = recorder = _PromptRecorder()
        e.answer_batch([Question(f"q{i}", q) for i, q in enumerate(questions)], top_k=10)
    finally:
        e.close()
    return recorder.prompts


def bench_llm(cfg, index: dict, questions: list[str], work: str, report: Report,
              concurrency: int = 4) -> dict:
    from infra.llm import server as llm
    from pipelines.answer import run_answer
    from transforms.query.answer import OpenAICompatibleClient

    qfile = os.path.join(work, "llm-questions.jsonl")
    with open(qfile, "w", encoding="utf-8") as f:
        f.writelines(json.dumps({"id": f"q{i}", "question": q}) + "\n" for i, q in enumerate(questions))
    n = len(questions)

    with llm.start(parallel=concurrency, threads=1, log_dir=os.path.join(work, "llm-bare")) as s:
        c = _llm_config(cfg, s.base_url, concurrency)
        prompts = _prompts(c, index["version_dir"], questions)
        client = OpenAICompatibleClient(s.base_url, llm.MODEL_NAME, timeout=300, max_tokens=c.answer.max_tokens,
                                        retries=0)
        before = s.metrics()
        t = time.perf_counter()
        with ThreadPoolExecutor(max_workers=concurrency) as pool:
            list(pool.map(lambda p: client.complete(*p), prompts))
        bare_s = time.perf_counter() - t
        after = s.metrics()
    bare_prompt_tokens = (after["llamacpp:prompt_tokens_total"] - before["llamacpp:prompt_tokens_total"]) / n
    bare_gen_tokens = (after["llamacpp:tokens_predicted_total"] - before["llamacpp:tokens_predicted_total"]) / n

    with llm.start(parallel=concurrency, threads=1, log_dir=os.path.join(work, "llm-job")) as s:
        c = _llm_config(cfg, s.base_url, concurrency)
        before = s.metrics()
        t = time.perf_counter()
        summary = run_answer(c, index["index_dir"], qfile, os.path.join(work, "llm-answers.jsonl"),
                             progress=False, log=lambda *_: None, overwrite=True)
        job_s = time.perf_counter() - t
        after = s.metrics()
    job_prompt_tokens = (after["llamacpp:prompt_tokens_total"] - before["llamacpp:prompt_tokens_total"]) / n

    label = f"a bare loop sending the same {n} prompts, {concurrency} in flight"
    report.add(Figure(SECTION, f"answer job q/s, {concurrency} in flight ({n} questions)", n / job_s, "q/s",
                      n / bare_s, label, note=f"{summary['answered']} answered, {summary['not_found']} not "
                                              f"found, {summary['unsupported']} unsupported"))
    report.add(Figure(SECTION, "prompt tokens per question (the job)", job_prompt_tokens, "tokens",
                      bare_prompt_tokens, "the bare loop's prompts",
                      note=f"top_chunks 2, max_source_chars 800; {bare_gen_tokens:.0f} generated tokens a question"))
    return {"job_qps": n / job_s, "bare_qps": n / bare_s, "prompt_tokens": job_prompt_tokens, "summary": summary}
