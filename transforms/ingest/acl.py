"""Access rules that fail closed.

Which path a rule prefix is matched against must not depend on where the listing started:
- with `source.root` set, the object's key relative to that root (a folder or s3:// prefix);
- without it, every '/'-boundary suffix of the object's full URI, so `secret/` matches
  `/data/corpus/secret/a.md` whether the run listed `/data/corpus` or `/data/corpus/secret`
  (a rule can match more paths, never fewer: more restrictive, never less).
A JSONL record's own `acl` may only narrow what its path allows (intersection); a record left
with no common group is visible to nobody (NOBODY), never to everybody.
"""
from __future__ import annotations

import os
from typing import Optional, Sequence

NOBODY = "!nobody"  # a group no question can name (question acl groups may not start with '!')
MATCH_VERSION = "acl-match-2"  # part of the processing key: rows built under older rules are redone

Rules = Sequence[tuple[str, Sequence[str]]]


def _strip_scheme(uri: str) -> str:
    if "://" in uri:
        uri = uri.split("://", 1)[1]
    return uri.replace(os.sep, "/").lstrip("/")


def match_keys(uri: str, key: str, root: Optional[str] = None) -> list[str]:
    """The paths rule prefixes are tested against for one object."""
    path = _strip_scheme(uri)
    if root:
        base = _strip_scheme(root if "://" in root else os.path.abspath(root)).rstrip("/") + "/"
        if path.startswith(base):
            return [path[len(base):]]
    parts = path.split("/")
    return ["/".join(parts[i:]) for i in range(len(parts))] + ([key] if key else [])


def path_groups(uri: str, key: str, rules: Rules, root: Optional[str] = None) -> Optional[list[str]]:
    """Union of the groups of every matching rule; None when no rule matches (public)."""
    keys = match_keys(uri, key, root)
    groups: Optional[list[str]] = None
    for prefix, rule_groups in rules:
        if any(k.startswith(prefix) for k in keys):
            groups = groups or []
            groups.extend(g for g in rule_groups if g not in groups)
    if groups is not None and not groups:
        return [NOBODY]  # a matching rule with no groups means nobody
    return groups


def effective_acl(allowed: Optional[list[str]], record_acl: Optional[list[str]]) -> list[str]:
    """What a document ends up with: its path's groups, narrowed by its own acl."""
    record_acl = list(record_acl or [])
    if allowed is None:
        return record_acl
    if not record_acl:
        return list(allowed)
    narrowed = [g for g in record_acl if g in allowed]
    return narrowed or [NOBODY]
