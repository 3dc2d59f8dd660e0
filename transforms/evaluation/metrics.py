"""Pure evaluation metrics over ranked id lists and graded qrels.

Definitions follow trec_eval / BEIR (pytrec_eval): gains are the qrels grades
themselves (not 2^g - 1), the discount is log2(rank + 1), the ideal ranking is
every judged document with grade > 0 sorted by grade, and a grade <= 0 counts
as not relevant. A query with no relevant document is left out by the caller.
"""
from __future__ import annotations

import math
import re
from typing import Hashable, Iterable, Optional, Sequence

Qrels = dict  # doc id -> grade (int)


def dedupe_first(ids: Iterable[Hashable]) -> list:
    """Chunk-level doc ids -> a document ranking: each document at its first occurrence."""
    seen, out = set(), []
    for i in ids:
        if i is not None and i not in seen:
            seen.add(i)
            out.append(i)
    return out


def relevant(qrels: Qrels) -> set:
    return {d for d, g in qrels.items() if g > 0}


def dcg_at_k(gains: Sequence[float], k: int) -> float:
    return sum(g / math.log2(r + 1) for r, g in enumerate(gains[:k], start=1) if g)


def ndcg_at_k(ranked: Sequence[Hashable], qrels: Qrels, k: int = 10) -> float:
    ideal = dcg_at_k(sorted((g for g in qrels.values() if g > 0), reverse=True), k)
    if ideal == 0:
        return 0.0
    return dcg_at_k([max(qrels.get(d, 0), 0) for d in ranked], k) / ideal


def recall_at_k(ranked: Sequence[Hashable], qrels: Qrels, k: int) -> float:
    rel = relevant(qrels)
    return len(rel.intersection(ranked[:k])) / len(rel) if rel else 0.0


def first_relevant_rank(ranked: Sequence[Hashable], qrels: Qrels) -> Optional[int]:
    """1-based rank of the first relevant document, None when none was retrieved."""
    for r, d in enumerate(ranked, start=1):
        if qrels.get(d, 0) > 0:
            return r
    return None


def mrr_at_k(ranked: Sequence[Hashable], qrels: Qrels, k: int = 10) -> float:
    r = first_relevant_rank(ranked[:k], qrels)
    return 1.0 / r if r else 0.0


def metric_fn(name: str):
    """'ndcg@10' | 'recall@50' | 'mrr@10' -> f(ranked, qrels) -> float."""
    m = re.fullmatch(r"(ndcg|recall|mrr)@(\d+)", name.strip().lower())
    if not m:
        raise ValueError(f"unknown metric {name!r} (ndcg@k | recall@k | mrr@k)")
    kind, k = m.group(1), int(m.group(2))
    fn = {"ndcg": ndcg_at_k, "recall": recall_at_k, "mrr": mrr_at_k}[kind]
    return lambda ranked, qrels: fn(ranked, qrels, k)


def mean(xs: Iterable[float]) -> float:
    xs = list(xs)
    return sum(xs) / len(xs) if xs else float("nan")


# --- answers ---------------------------------------------------------------------------

_WS = re.compile(r"\s+")


def normalize_text(s: str) -> str:
    """Case and whitespace only: a span must appear verbatim apart from those."""
    return _WS.sub(" ", (s or "").lower()).strip()


def contains_span(answer: str, spans: Iterable[str]) -> bool:
    a = normalize_text(answer)
    return any(normalize_text(s) and normalize_text(s) in a for s in spans)


def citation_precision(cited: Sequence[Hashable], rel: set) -> Optional[float]:
    """Share of cited documents that are relevant; None when nothing was cited."""
    cited = dedupe_first(cited)
    return sum(d in rel for d in cited) / len(cited) if cited else None


def threshold_sweep(pos: Sequence[float], neg: Sequence[float],
                    candidates: Optional[Sequence[float]] = None) -> list[dict]:
    """For answerable (pos) vs unanswerable (neg) evidence scores: at each threshold t
    (answer iff score >= t), the share of pos answered, of neg refused, and their mean."""
    if candidates is None:
        candidates = [round(x * 0.01, 2) for x in range(0, 101)]
    out = []
    for t in candidates:
        tpr = mean(s >= t for s in pos) if pos else float("nan")
        tnr = mean(s < t for s in neg) if neg else float("nan")
        out.append({"threshold": t, "answered_answerable": tpr, "refused_unanswerable": tnr,
                    "balanced_accuracy": (tpr + tnr) / 2})
    return out


def best_threshold(sweep: list[dict]) -> dict:
    """The sweep row with the best balanced accuracy (the lowest threshold on ties)."""
    return max(sweep, key=lambda r: (r["balanced_accuracy"], -r["threshold"]))


def auc(pos: Sequence[float], neg: Sequence[float]) -> float:
    """P(score of a random answerable > a random unanswerable), ties count half."""
    if not pos or not neg:
        return float("nan")
    ranked = sorted([(s, 1) for s in pos] + [(s, 0) for s in neg])
    # Mann-Whitney U from average ranks, so ties are handled exactly.
    i, rank_sum = 0, 0.0
    while i < len(ranked):
        j = i
        while j < len(ranked) and ranked[j][0] == ranked[i][0]:
            j += 1
        avg = (i + 1 + j) / 2
        rank_sum += avg * sum(lbl for _, lbl in ranked[i:j])
        i = j
    u = rank_sum - len(pos) * (len(pos) + 1) / 2
    return u / (len(pos) * len(neg))


# --- answer-level figures and calibration (docs/evaluation.md) -------------------------------

_CODE_MARKS = ("(", ".", "::", "_", "$")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_IDENT_CHAR = re.compile(r"[A-Za-z0-9_]")


def looks_like_code(phrase: str) -> bool:
    """A gold phrase in code form: it holds one of ( . :: _ $, or it is a single identifier
    (`sprintf`, `File::Copy`, `os.path.join()`, `$_`, `user.name`; not "git config")."""
    p = (phrase or "").strip()
    return bool(p) and (any(m in p for m in _CODE_MARKS) or bool(_IDENT.fullmatch(p)))


def contains_code_name(answer: str, names: Iterable[str]) -> bool:
    """The answer names one of `names` (case and whitespace as contains_span), not inside a longer
    identifier: an edge of the name that is an identifier character may not touch another one
    (`open` is in "use open(FH)" but not in "reopen"; `tr` is not in "string")."""
    a = normalize_text(answer)
    for name in names:
        n = normalize_text(name)
        if not n:
            continue
        start = a.find(n)
        while start >= 0:
            end = start + len(n)
            left_ok = not (_IDENT_CHAR.match(n[0]) and start > 0 and _IDENT_CHAR.match(a[start - 1]))
            right_ok = not (_IDENT_CHAR.match(n[-1]) and end < len(a) and _IDENT_CHAR.match(a[end]))
            if left_ok and right_ok:
                return True
            start = a.find(n, start + 1)
    return False


def band_of(x: float, n_bands: int = 10) -> int:
    """The band of a confidence in [0, 1]: band i holds i/n <= x < (i+1)/n, the edges compared as
    the floats i/n (0.3 is band 3's, 0.3 - 1e-12 band 2's, whatever x * n rounds to); the last band
    also holds 1.0, and values outside [0, 1] go to the end bands."""
    x = float(x)
    b = max(0, min(n_bands - 1, math.floor(x * n_bands)))
    if b > 0 and x < b / n_bands:
        b -= 1
    elif b < n_bands - 1 and x >= (b + 1) / n_bands:
        b += 1
    return b


def reliability_table(conf: Sequence[float], right: Sequence[bool], n_bands: int = 10) -> list[dict]:
    """One row per confidence band, empty bands included: lo, hi, count, mean_confidence and
    share_right (NaN for an empty band). A calibrated confidence has share_right ~ mean_confidence."""
    if len(conf) != len(right):
        raise ValueError("conf and right differ in length")
    members: list[list[tuple[float, bool]]] = [[] for _ in range(n_bands)]
    for c, r in zip(conf, right):
        members[band_of(c, n_bands)].append((float(c), bool(r)))
    return [{"band": f"{i / n_bands:.1f}-{(i + 1) / n_bands:.1f}", "lo": i / n_bands, "hi": (i + 1) / n_bands,
             "count": len(m), "mean_confidence": mean(c for c, _ in m), "share_right": mean(r for _, r in m)}
            for i, m in enumerate(members)]


def expected_calibration_error(conf: Sequence[float], right: Sequence[bool], n_bands: int = 10) -> float:
    """ECE: sum over bands of (band count / all) x |mean confidence - share right|; NaN for no input."""
    rows = reliability_table(conf, right, n_bands)
    total = sum(r["count"] for r in rows)
    if not total:
        return float("nan")
    return sum(r["count"] / total * abs(r["mean_confidence"] - r["share_right"]) for r in rows if r["count"])


def auc_of(scores: Sequence[float], labels: Sequence[bool]) -> float:
    """AUC of scores against boolean labels (P(a random positive outscores a random negative))."""
    return auc([s for s, y in zip(scores, labels) if y], [s for s, y in zip(scores, labels) if not y])


# The stages every evaluation scores, and the metrics of each.
STAGES = ("bm25", "dense", "hybrid", "final")  # final: the answer file's own ranking
RECALL_KS = (5, 10, 50, 100)
METRICS = ("ndcg@10",) + tuple(f"recall@{k}" for k in RECALL_KS) + ("mrr@10",)
