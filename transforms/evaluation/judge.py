"""LLM-judged answer quality for `ragbeam eval` (the `judge:` config section, the `llm:` model).

- faithfulness: the share of an answer's claims (its sentences) that the judge says the
  sources they cite support, one yes/no question per claim; averaged over answers;
- answer relevance: whether the judge says the answer addresses the question, one yes/no
  question per answer; the share of answers.

The prompts are versioned (PROMPT_VERSIONS); the report names the versions and the model, so
figures from different judges or prompts are never compared unknowingly. A verdict that is
neither yes nor no, or a request that fails, is counted and left out, never guessed.
"""
from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Optional

from transforms.query.cite import _MARKER, strip_markers
from transforms.query.grounding import _split_sentences

PROMPT_VERSIONS = {"faithfulness": "faithfulness:1", "answer_relevance": "answer_relevance:1"}
_FAITH_SYSTEM = ("You check claims against a source. Reply with one word: yes if the source states or directly "
                 "implies the claim, no otherwise.")
_RELEVANCE_SYSTEM = ("You check answers. Reply with one word: yes if the answer addresses the question that was "
                     "asked, no if it is about something else.")
_VERDICT = re.compile(r"^\W*(yes|no)\b", re.IGNORECASE)
_SOURCE_CHARS = 2000  # of each cited source shown to the judge


def verdict(reply: Optional[str]) -> Optional[bool]:
    m = _VERDICT.match(reply or "")
    return None if m is None else m.group(1).lower() == "yes"


@dataclass
class Judged:
    faithfulness: Optional[float]  # None: no claim got a verdict
    relevant: Optional[bool]
    claims: int
    unparsed: int  # verdicts that were neither yes nor no, or requests that failed


class Judge:
    def __init__(self, client, concurrency: int = 4):
        self.client, self.concurrency = client, max(1, concurrency)

    def _ask(self, system: str, user: str) -> Optional[bool]:
        try:
            return verdict(self.client.complete(system, user))
        except Exception:  # noqa: BLE001 -- a failed request is an unparsed verdict (counted)
            return None

    def claims(self, answer: str, sources: dict[int, str]) -> list[tuple[str, str]]:
        """(claim without its markers, the text of the sources it cites) per cited sentence."""
        out = []
        for sent in _split_sentences(answer):
            ns = [int(p) for m in _MARKER.finditer(sent) for p in m.group(1).split(",")]
            texts = [sources[n][:_SOURCE_CHARS] for n in dict.fromkeys(ns) if n in sources]
            claim = strip_markers(sent)
            if texts and claim:
                out.append((claim, "\n\n".join(texts)))
        return out

    def judge(self, items: list[tuple[str, str, dict[int, str]]]) -> list[Judged]:
        """items: (question, answer, {source number: cited chunk text}) per answered question."""
        jobs = []  # (item index, "claim" | "relevance", system, user)
        for i, (question, answer, sources) in enumerate(items):
            for claim, text in self.claims(answer, sources):
                jobs.append((i, "claim", _FAITH_SYSTEM, f"Source:\n{text}\n\nClaim: {claim}\n\n"
                                                        "Does the source support the claim? Answer yes or no."))
            jobs.append((i, "relevance", _RELEVANCE_SYSTEM, f"Question: {question.strip()}\n\nAnswer: "
                         f"{strip_markers(answer)}\n\nDoes the answer address the question? Answer yes or no."))
        with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
            verdicts = list(pool.map(lambda j: self._ask(j[2], j[3]), jobs))
        per = [{"yes": 0, "judged": 0, "claims": 0, "relevant": None, "unparsed": 0} for _ in items]
        for (i, kind, _, _), v in zip(jobs, verdicts):
            p = per[i]
            if v is None:
                p["unparsed"] += 1
            if kind == "claim":
                p["claims"] += 1
                if v is not None:
                    p["judged"] += 1
                    p["yes"] += v
            else:
                p["relevant"] = v
        return [Judged(p["yes"] / p["judged"] if p["judged"] else None, p["relevant"], p["claims"], p["unparsed"])
                for p in per]


def judge_report(judged: list[Judged], model: Optional[str]) -> dict:
    """The report's `judge` block."""
    faith = [j.faithfulness for j in judged if j.faithfulness is not None]
    rel = [j.relevant for j in judged if j.relevant is not None]
    return {"model": model, "prompt_versions": dict(PROMPT_VERSIONS), "answers_judged": len(judged),
            "claims_judged": sum(j.claims for j in judged),
            "faithfulness": sum(faith) / len(faith) if faith else None,
            "answer_relevance": sum(rel) / len(rel) if rel else None,
            "unparsed_verdicts": sum(j.unparsed for j in judged)}
