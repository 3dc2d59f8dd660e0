"""LLM-judged answer quality for `ragbeam eval` (the `judge:` config section, the `llm:` model).

- faithfulness: the share of an answer's claims (its sentences) that the judge says the
  sources they cite support, one yes/no question per claim; averaged over answers;
- answer relevance: whether the judge says the answer addresses the question, one yes/no
  question per answer; the share of answers.

The prompts are versioned (PROMPT_VERSIONS); the report names the versions and the model, so
figures from different judges or prompts are never compared unknowingly. A verdict that is
neither yes nor no (nor a plain "does not support" / "supports"), or a request that fails, is
counted and left out, never guessed.

A judge is itself checked: for up to CONTROLS answers the judge also gets a claim that must be
supported (the cited source's own first sentence, against that source) and one that must not
(the answer's first claim against another question's source). The report gives the share of
control verdicts it got right and `reliable` (at least 0.8 of them right, each kind half or
better), so a judge that says "no" to everything is shown as such, not as an answer-quality
figure.
"""
from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Optional

from transforms.common.sentences import split_answer_sentences
from transforms.query.cite import _MARKER, normalize_for_match, strip_markers

PROMPT_VERSIONS = {"faithfulness": "faithfulness:1", "answer_relevance": "answer_relevance:1"}
_FAITH_SYSTEM = ("You check claims against a source. Reply with one word: yes if the source states or directly "
                 "implies the claim, no otherwise.")
_RELEVANCE_SYSTEM = ("You check answers. Reply with one word: yes if the answer addresses the question that was "
                     "asked, no if it is about something else.")
_VERDICT = re.compile(r"^\W*(yes|no)\b", re.IGNORECASE)
_SAYS_NO = re.compile(r"\b(does not|doesn't|do not|cannot|can't) (support|say|state)|\bnot (supported|true)\b",
                      re.IGNORECASE)
_SAYS_YES = re.compile(r"\b(supports|is supported|states that|is true)\b", re.IGNORECASE)
_SOURCE_CHARS = 2000  # of each cited source shown to the judge
CONTROLS = 20  # answers that also get a must-be-yes and a must-be-no claim
RELIABLE = 0.8  # control verdicts right, at least


def verdict(reply: Optional[str]) -> Optional[bool]:
    """yes/no from the reply's first word, else from a plain "does not support" / "supports"."""
    text = reply or ""
    m = _VERDICT.match(text)
    if m:
        return m.group(1).lower() == "yes"
    no, yes = bool(_SAYS_NO.search(text)), bool(_SAYS_YES.search(text))
    return None if no == yes else yes


@dataclass
class Judged:
    faithfulness: Optional[float]  # None: no claim got a verdict
    relevant: Optional[bool]
    claims: int
    unparsed: int  # verdicts that were neither yes nor no, or requests that failed
    controls: tuple = ()  # (expected, verdict) of this answer's control claims


def _claim_prompt(claim: str, text: str) -> str:
    return f"Source:\n{text}\n\nClaim: {claim}\n\nDoes the source support the claim? Answer yes or no."


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
        for sent in split_answer_sentences(answer):
            ns = [int(p) for m in _MARKER.finditer(sent) for p in m.group(1).split(",")]
            texts = [sources[n][:_SOURCE_CHARS] for n in dict.fromkeys(ns) if n in sources]
            claim = strip_markers(sent)
            if texts and claim:
                out.append((claim, "\n\n".join(texts)))
        return out

    def judge(self, items: list[tuple[str, str, dict[int, str]]]) -> list[Judged]:
        """items: (question, answer, {source number: cited chunk text}) per answered question."""
        jobs = []  # (item index, "claim" | "relevance" | "control yes" | "control no", system, user)
        claims = [self.claims(answer, sources) for _, answer, sources in items]
        for i, (question, answer, sources) in enumerate(items):
            for claim, text in claims[i]:
                jobs.append((i, "claim", _FAITH_SYSTEM, _claim_prompt(claim, text)))
            jobs.append((i, "relevance", _RELEVANCE_SYSTEM, f"Question: {question.strip()}\n\nAnswer: "
                         f"{strip_markers(answer)}\n\nDoes the answer address the question? Answer yes or no."))
        jobs += self._controls(claims)
        with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
            verdicts = list(pool.map(lambda j: self._ask(j[2], j[3]), jobs))
        per = [{"yes": 0, "judged": 0, "claims": 0, "relevant": None, "unparsed": 0, "controls": []} for _ in items]
        for (i, kind, _, _), v in zip(jobs, verdicts):
            p = per[i]
            if kind.startswith("control"):
                p["controls"].append((kind == "control yes", v))
                continue
            if v is None:
                p["unparsed"] += 1
            if kind == "claim":
                p["claims"] += 1
                if v is not None:
                    p["judged"] += 1
                    p["yes"] += v
            else:
                p["relevant"] = v
        return [Judged(p["yes"] / p["judged"] if p["judged"] else None, p["relevant"], p["claims"], p["unparsed"],
                       tuple(p["controls"])) for p in per]

    @staticmethod
    def _controls(claims: list[list[tuple[str, str]]]) -> list[tuple]:
        """A must-be-yes claim (the source's own first sentence) and a must-be-no one (this answer's
        first claim against the next answer's source) for up to CONTROLS answers."""
        out = []
        with_claims = [i for i, c in enumerate(claims) if c]
        for k, i in enumerate(with_claims[:CONTROLS]):
            claim, text = claims[i][0]
            own = split_answer_sentences(text)
            if own:
                out.append((i, "control yes", _FAITH_SYSTEM, _claim_prompt(own[0], text)))
            other = claims[with_claims[(k + 1) % len(with_claims)]][0][1]
            if len(with_claims) > 1 and normalize_for_match(claim) not in normalize_for_match(other):
                out.append((i, "control no", _FAITH_SYSTEM, _claim_prompt(claim, other)))
        return out


def judge_report(judged: list[Judged], model: Optional[str]) -> dict:
    """The report's `judge` block."""
    faith = [j.faithfulness for j in judged if j.faithfulness is not None]
    rel = [j.relevant for j in judged if j.relevant is not None]
    controls = [c for j in judged for c in j.controls]

    def right(kind: Optional[bool]) -> Optional[float]:
        xs = [v == want for want, v in controls if kind is None or want == kind]
        return sum(xs) / len(xs) if xs else None
    acc, on_yes, on_no = right(None), right(True), right(False)
    return {"model": model, "prompt_versions": dict(PROMPT_VERSIONS), "answers_judged": len(judged),
            "claims_judged": sum(j.claims for j in judged),
            "faithfulness": sum(faith) / len(faith) if faith else None,
            "answer_relevance": sum(rel) / len(rel) if rel else None,
            "unparsed_verdicts": sum(j.unparsed for j in judged),
            "controls": {"judged": len(controls), "right": acc, "right_on_supported": on_yes,
                         "right_on_unsupported": on_no},
            "reliable": bool(acc is not None and acc >= RELIABLE and (on_yes or 0) >= 0.5 and (on_no or 0) >= 0.5)}
