"""A non-finite score anywhere means "not found" (issue 35, item 6).

A NaN compares as neither low nor high, so a NaN evidence passes `evidence < threshold` as if it
were high, and NaN would then be written into the answer file (invalid JSON for most readers).
Config refuses non-finite numbers at load, but a score can still overflow (a finite but huge
`retrieve.bm25_k1`) or come from a damaged vector. The engine hands every record through
`finite_or_not_found` before it leaves: a record with a non-finite evidence, confidence or
ranking score that was answered becomes "not found" with no citations, and every non-finite
number in it is written as null. A few float checks per record: no cost the answer job notices.
"""
from __future__ import annotations

import math
from typing import Any

NOT_FOUND_TEXT = "Not found in the sources."  # the extractive answerer's (transforms/query/answer.py)
_SCORED = ("evidence_score", "confidence")
_LISTS = ("retrieved", "retrieved_docs", "citations", "conflicts")


def _finite(value: Any) -> tuple[Any, bool]:
    """(value with every non-finite float replaced by None, whether one was found)."""
    if isinstance(value, float):
        return (value, True) if math.isfinite(value) else (None, False)
    if isinstance(value, dict):
        ok = True
        out = {}
        for k, v in value.items():
            out[k], good = _finite(v)
            ok &= good
        return (out, ok) if not ok else (value, True)
    if isinstance(value, (list, tuple)):
        ok = True
        out = []
        for v in value:
            nv, good = _finite(v)
            out.append(nv)
            ok &= good
        return (out, ok) if not ok else (value, True)
    if hasattr(value, "dtype") and hasattr(value, "item") and getattr(value, "shape", None) == ():  # numpy scalar
        return _finite(value.item())
    return value, True


_SCALARS = (str, int, bool, type(None))


def _has_non_finite(values) -> bool:
    """Any non-finite float (or numpy float) anywhere in these values? One tight walk: the
    common case, every number finite, costs a few microseconds a record."""
    stack = list(values)
    while stack:
        v = stack.pop()
        t = type(v)
        if t is float:
            if v - v != 0.0:  # nan - nan and inf - inf are nan
                return True
        elif t is dict:
            stack.extend(v.values())
        elif t is list or t is tuple:
            stack.extend(v)
        elif t not in _SCALARS and hasattr(v, "dtype"):
            try:
                if not math.isfinite(float(v)):
                    return True
            except (TypeError, ValueError):
                stack.extend(list(v))  # an array
    return False


def finite_or_not_found(rec):
    """The record, with a non-finite score turning an answer into "not found" (see module doc)."""
    if not _has_non_finite([getattr(rec, n, None) for n in _SCORED + _LISTS] + [getattr(rec, "trace", None)]):
        return rec
    ok = True
    for name in _SCORED:
        v = getattr(rec, name, None)
        if isinstance(v, float) and not math.isfinite(v):
            setattr(rec, name, 0.0 if name == "evidence_score" else None)
            ok = False
    for name in _LISTS:
        v = getattr(rec, name, None)
        if v:
            nv, good = _finite(v)
            if not good:
                setattr(rec, name, nv)
                ok = False
    if getattr(rec, "trace", None):
        rec.trace, _ = _finite(rec.trace)
    if not ok and rec.status == "answered":
        rec.status = "not_found"
        rec.answer = NOT_FOUND_TEXT
        rec.citations = []
        rec.conflicts = []
    return rec
