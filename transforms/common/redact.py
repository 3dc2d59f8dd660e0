"""Masking secrets before they reach a message, a record or a manifest.

- user info in URLs (`http://user:pass@host` -> `http://***@host`), anywhere in a text;
- `runner.options` entries whose name looks like a credential, and option values that
  carry a URL with user info.
"""
from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit, urlunsplit

_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)(?P<userinfo>[^/@\s?#]*)@")
MASK = "***"


def mask_url(url: str) -> str:
    """The URL with any user info replaced by ***."""
    return _USERINFO.sub(lambda m: f"{m.group('scheme')}{MASK}@", url) if isinstance(url, str) else url


def redact_text(text: str) -> str:
    """Mask every URL user info inside a free text (error messages, reprs)."""
    return mask_url(text)


def split_userinfo(url: str) -> tuple[str, str | None, str | None]:
    """(url without user info, user, password): for turning user info into a header."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url, None, None
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment)), parts.username, parts.password


SECRET_KEYS = {("s3", "access_key_id"), ("s3", "secret_access_key"), ("answer", "api_key"), ("llm", "api_key")}
_CREDENTIAL_NAME = re.compile(r"(secret|password|passwd|token|credential|api[_-]?key|access[_-]?key|private[_-]?key)",
                              re.IGNORECASE)


def is_secret_path(path: tuple) -> bool:
    """A config key whose value must never be printed: the declared secrets, and any
    runner.options entry whose name looks like a credential."""
    keys = tuple(str(p) for p in path)
    if keys[:2] in SECRET_KEYS:
        return True
    return len(keys) >= 3 and keys[:2] == ("runner", "options") and bool(_CREDENTIAL_NAME.search(keys[2]))


def mask_options(options: dict[str, Any]) -> dict[str, Any]:
    """runner.options for a manifest: credential-like names masked, URL user info masked."""
    out = {}
    for k, v in options.items():
        if is_secret_path(("runner", "options", k)):
            out[k] = MASK
        elif isinstance(v, str):
            out[k] = mask_url(v)
        else:
            out[k] = v
    return out
