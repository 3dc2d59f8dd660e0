"""Per-question checks of `acl` and `filters`: a bad value is that question's error only.

acl: a list of non-empty strings (CSV: "a;b" or "a,b"); filters: a JSON object whose keys are
plain metadata names and whose values are JSON scalars (equality filters).
"""
from __future__ import annotations

import json
import re
from typing import Any, Optional

MAX_GROUPS = 256
MAX_FILTERS = 64
MAX_GROUP_CHARS = 256
_FILTER_KEY = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:\-]{0,127}")


class QuestionFieldError(ValueError):
    pass


def parse_acl(value: Any) -> Optional[list[str]]:
    if value is None or value == "":
        return None
    if isinstance(value, str):  # CSV: groups separated by ';' or ','
        value = [g.strip() for g in value.replace(";", ",").split(",") if g.strip()]
    if not isinstance(value, (list, tuple)):
        raise QuestionFieldError(f"acl must be a list of group names, not {type(value).__name__}")
    groups = []
    for g in value:
        if not isinstance(g, str) or not g.strip():
            raise QuestionFieldError("acl must be a list of non-empty strings")
        if g.strip().startswith("!"):
            raise QuestionFieldError("acl group names may not start with '!' (reserved)")
        if len(g) > MAX_GROUP_CHARS:
            raise QuestionFieldError(f"acl group longer than {MAX_GROUP_CHARS} characters")
        groups.append(g.strip())
    if len(groups) > MAX_GROUPS:
        raise QuestionFieldError(f"acl has more than {MAX_GROUPS} groups")
    return groups or None


def parse_filters(value: Any) -> Optional[dict[str, Any]]:
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, str):  # CSV: a JSON object
        try:
            value = json.loads(value)
        except ValueError as e:
            raise QuestionFieldError(f"filters is not valid JSON: {e}") from None
    if not isinstance(value, dict):
        raise QuestionFieldError(f"filters must be a JSON object, not {type(value).__name__}")
    if len(value) > MAX_FILTERS:
        raise QuestionFieldError(f"filters has more than {MAX_FILTERS} keys")
    for k, v in value.items():
        if not isinstance(k, str) or not _FILTER_KEY.fullmatch(k):
            raise QuestionFieldError(f"filters key {str(k)[:40]!r} is not a metadata name "
                                     "(letters, digits, _ . : -)")
        if v is not None and not isinstance(v, (str, int, float, bool)):
            raise QuestionFieldError(f"filters[{k!r}] must be a string, number, boolean or null")
        if isinstance(v, float) and v != v:
            raise QuestionFieldError(f"filters[{k!r}] is NaN")
    return value or None
