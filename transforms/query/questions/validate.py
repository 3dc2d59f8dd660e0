"""Per-question checks of `id`, `acl`, `filters` and the record's shape: a bad value is that
question's error only.

id: a string or an integer (an integral float, as pandas writes a nullable int column, is its
integer); acl: a list of non-empty strings (CSV: "a;b" or "a,b"); filters: a JSON object whose
keys are plain metadata names and whose values are JSON scalars (equality filters). No value may
be nested deeper than MAX_DEPTH or hold a lone UTF-16 surrogate: either would fail the job later,
when the record is written.
"""
from __future__ import annotations

import json
import re
from typing import Any, Optional

MAX_GROUPS = 256
MAX_FILTERS = 64
MAX_GROUP_CHARS = 256
_FILTER_KEY = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:\-]{0,127}")
MAX_DEPTH = 32
_SURROGATE = re.compile("[\ud800-\udfff]")


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


def parse_id(value: Any) -> Optional[str]:
    """The id as text, None when absent; QuestionFieldError for a value that is no id."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):  # before int: bool is an int in Python
        raise QuestionFieldError("id must be a string or an integer, not a boolean")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if value != value:
            raise QuestionFieldError("id is NaN (a missing value in a float id column?)")
        if value.is_integer():  # pandas writes a nullable int column as float
            return str(int(value))
        raise QuestionFieldError(f"id must be a string or an integer, not the number {value!r}")
    raise QuestionFieldError(f"id must be a string or an integer, not {type(value).__name__}")


def has_surrogate(text: str) -> bool:
    return _SURROGATE.search(text) is not None


def without_surrogates(text: Any) -> Optional[str]:
    """A string fit to be written as UTF-8 (lone surrogates become U+FFFD), else None."""
    return _SURROGATE.sub("\ufffd", text) if isinstance(text, str) else None


def check_shape(rec: Any) -> None:
    """Refuse values nested deeper than MAX_DEPTH and strings (keys too) with lone surrogates."""
    stack = [(rec, 0)]
    while stack:  # no recursion: the record may be as deep as json allowed
        value, depth = stack.pop()
        if isinstance(value, str):
            if has_surrogate(value):
                raise QuestionFieldError("holds a lone UTF-16 surrogate (an escape such as \\ud800 "
                                         "without its pair), which is not valid Unicode")
        elif isinstance(value, (dict, list, tuple)):
            if depth >= MAX_DEPTH:
                raise QuestionFieldError(f"holds values nested deeper than {MAX_DEPTH} levels")
            items = value.items() if isinstance(value, dict) else enumerate(value)
            for k, v in items:
                stack.append((k, depth + 1))
                stack.append((v, depth + 1))
