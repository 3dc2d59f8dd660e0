"""Masking secrets before they reach a message, a record or a manifest.

One mechanism, keyed on the config schema (issue 35, items 1 and 2):

- a config key is secret when the schema marks it (`json_schema_extra={"secret": True}`,
  configs/schema.py `_secret`), when its field is hidden from reprs (`repr=False`), or when its
  name looks like a credential (`*_api_key`, `*password*`, `*_token`, ...), so a new secret key
  is masked even if nobody remembered to mark it; entries of a free-form mapping
  (`runner.options`) are secret by the same name rule;
- `mask_config` writes a config (manifest.json, eval report.json / report.html) with every
  secret value as `***` and the user info of every URL anywhere in it masked;
- the secret values themselves (and URL passwords, and the Basic-auth token they make) are
  registered when a config is loaded or unpickled on a worker, or when a chat client is built,
  and `redact_text` masks them in every message that leaves the process: answer and dead-letter
  records, logs, CLI errors, exceptions, HTTP error bodies an LLM server sent back.
"""
from __future__ import annotations

import base64
import re
import threading
import typing
from typing import Any, Iterable
from urllib.parse import quote, unquote, urlsplit, urlunsplit

_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)(?P<userinfo>[^/@\s?#]*)@")
MASK = "***"
# A secret shorter than this is not searched for in free text: it would mask ordinary words.
MIN_SECRET_CHARS = 6


def mask_url(url: str) -> str:
    """The URL with any user info replaced by ***."""
    return _USERINFO.sub(lambda m: f"{m.group('scheme')}{MASK}@", url) if isinstance(url, str) else url


# --- secret values known to this process -------------------------------------------------------

_values: set[str] = set()
_pattern: "re.Pattern | None" = None
_lock = threading.Lock()


def _variants(value: str) -> set[str]:
    """The forms a secret travels in: as written, percent-decoded and -encoded."""
    out = {value}
    out.add(unquote(value))
    out.add(quote(value, safe=""))
    return {v for v in out if len(v) >= MIN_SECRET_CHARS}


def _compile(values: Iterable[str]):
    ordered = sorted(set(values), key=len, reverse=True)  # the longest first: no half-masked secret
    return re.compile("|".join(re.escape(v) for v in ordered)) if ordered else None


def register_secret_values(values: Iterable[Any]) -> None:
    """Remember secret values so that redact_text masks them (strings shorter than
    MIN_SECRET_CHARS are not searched for)."""
    global _pattern
    new = set()
    for v in values:
        if isinstance(v, str) and v:
            new |= _variants(v)
    with _lock:
        if new - _values:
            _values.update(new)
            _pattern = _compile(_values)


def url_secrets(url: str) -> list[str]:
    """The password of a URL's user info and the Basic-auth token user info turns into."""
    try:
        parts = urlsplit(url)
        user, password = parts.username, parts.password
    except ValueError:
        return []
    if user is None and password is None:
        return []
    token = base64.b64encode(f"{unquote(user or '')}:{unquote(password or '')}".encode()).decode()
    return [p for p in (password, token) if p]


def redact_text(text: str, extra: Iterable[str] = ()) -> str:
    """Mask every URL user info and every registered secret value (and `extra` ones) in a text."""
    if not isinstance(text, str):
        return text
    text = mask_url(text)
    pattern = _pattern
    if pattern is not None:
        text = pattern.sub(MASK, text)
    more = [v for e in extra if isinstance(e, str) and e for v in _variants(e)]
    if more:
        text = _compile(more).sub(MASK, text)
    return text


def split_userinfo(url: str) -> tuple[str, str | None, str | None]:
    """(url without user info, user, password): for turning user info into a header."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url, None, None
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment)), parts.username, parts.password


# --- secret keys, read off the schema ----------------------------------------------------------

_CREDENTIAL_NAME = re.compile(r"(secret|password|passwd|token|credential|api[_-]?key|access[_-]?key|private[_-]?key)",
                              re.IGNORECASE)
# A schema key's name: `max_tokens`, `chunk_tokens` count tokens, `session_token` is one.
_CREDENTIAL_KEY = re.compile(r"(secret|password|passwd|credential|api[_-]?key|access[_-]?key|private[_-]?key"
                             r"|(^|_)token$)", re.IGNORECASE)

SECRET_KEYS: set[tuple] = set()  # the config's secret leaf paths, filled from the schema (declare_schema)
_FREE_MAPPINGS: set[tuple] = set()  # paths of free-form mappings (runner.options): entries secret by name
_schema = None


def _sub_model(annotation):
    """The pydantic model a field holds (itself, Optional[...] or list[...] of it), or None."""
    for a in (annotation, *typing.get_args(annotation)):
        if isinstance(a, type) and hasattr(a, "model_fields"):
            return a
        for b in typing.get_args(a):
            if isinstance(b, type) and hasattr(b, "model_fields"):
                return b
    return None


def _is_mapping(annotation) -> bool:
    return any((typing.get_origin(a) or a) is dict for a in (annotation, *typing.get_args(annotation)))


def is_secret_field(name: str, field) -> bool:
    """Marked secret in the schema, hidden from reprs, or named like a credential."""
    extra = field.json_schema_extra
    return ((isinstance(extra, dict) and bool(extra.get("secret"))) or field.repr is False
            or bool(_CREDENTIAL_KEY.search(name)))


def secret_paths(model, prefix: tuple = ()) -> tuple[set, set]:
    """(secret leaf paths, free-form mapping paths) of a pydantic model class, sections flattened."""
    secrets, mappings = set(), set()
    for name, field in model.model_fields.items():
        path = prefix + (name,)
        sub = _sub_model(field.annotation)
        if is_secret_field(name, field) and sub is None:
            secrets.add(path)
        elif sub is not None:
            s, m = secret_paths(sub, path)
            secrets |= s
            mappings |= m
        elif _is_mapping(field.annotation):
            mappings.add(path)
    return secrets, mappings


def declare_schema(model) -> None:
    """configs/schema.py hands over its Config class: its secret keys are read off it."""
    global _schema
    _schema = model
    secrets, mappings = secret_paths(model)
    SECRET_KEYS.clear()
    SECRET_KEYS.update(secrets)
    _FREE_MAPPINGS.clear()
    _FREE_MAPPINGS.update(mappings)


def is_secret_path(path: tuple) -> bool:
    """A config key whose value must never be printed: the schema's secret keys, and any entry of
    a free-form mapping (runner.options) whose name looks like a credential."""
    keys = tuple(str(p) for p in path if not isinstance(p, int))
    if any(keys[:len(s)] == s for s in SECRET_KEYS):
        return True
    return any(len(keys) > len(m) and keys[:len(m)] == m and bool(_CREDENTIAL_NAME.search(keys[len(m)]))
               for m in _FREE_MAPPINGS)


def mask_options(options: dict[str, Any]) -> dict[str, Any]:
    """A free-form mapping for a manifest: credential-like names masked, URL user info masked."""
    return _mask_free(options)


def _mask_free(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: (MASK if isinstance(k, str) and _CREDENTIAL_NAME.search(k) and v is not None else _mask_free(v))
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_mask_free(v) for v in value]
    if isinstance(value, str):
        return redact_text(value)
    return value


def _mask_model(model_cls, data: dict) -> dict:
    out = {}
    for name, value in data.items():
        field = model_cls.model_fields.get(name) if model_cls is not None else None
        sub = _sub_model(field.annotation) if field is not None else None
        if field is not None and sub is None and is_secret_field(name, field):
            out[name] = None if value is None else MASK
        elif sub is not None and isinstance(value, dict):
            out[name] = _mask_model(sub, value)
        elif sub is not None and isinstance(value, list):
            out[name] = [_mask_model(sub, v) if isinstance(v, dict) else _mask_free(v) for v in value]
        else:
            out[name] = _mask_free(value)
    return out


def mask_config(cfg) -> dict:
    """A config as it may be written (manifest.json, report.json, report.html): every secret key's
    value `***` (null stays null), every credential-like entry of a free-form mapping `***`, and
    every string anywhere with its URL user info and any registered secret value masked."""
    return _mask_model(type(cfg), cfg.model_dump(mode="json"))


def config_secret_values(cfg) -> list[str]:
    """Every secret value a config holds: its secret keys', credential-like mapping entries',
    and the passwords (and Basic tokens) of URLs anywhere in it."""
    found: list[str] = []

    def walk(model_cls, data):
        for name, value in data.items():
            field = model_cls.model_fields.get(name) if model_cls is not None else None
            sub = _sub_model(field.annotation) if field is not None else None
            if field is not None and sub is None and is_secret_field(name, field):
                if isinstance(value, str):
                    found.append(value)
                    found.extend(url_secrets(value))
            elif sub is not None and isinstance(value, dict):
                walk(sub, value)
            elif sub is not None and isinstance(value, list):
                for v in value:
                    if isinstance(v, dict):
                        walk(sub, v)
            else:
                free(value)

    def free(value, name: str = ""):
        if isinstance(value, dict):
            for k, v in value.items():
                free(v, str(k))
        elif isinstance(value, (list, tuple)):
            for v in value:
                free(v)
        elif isinstance(value, str):
            if name and _CREDENTIAL_NAME.search(name):
                found.append(value)
            found.extend(url_secrets(value))
    walk(type(cfg), cfg.model_dump(mode="python"))
    return found


def redact_exception(error: BaseException, extra: Iterable[str] = ()) -> BaseException:
    """Mask secrets in an exception's message (its string args), in place; the exception back."""
    try:
        args = tuple(redact_text(a, extra) if isinstance(a, str) else a for a in error.args)
        if args != error.args:
            error.args = args
    except Exception:  # noqa: BLE001 -- an exception type with odd args keeps them
        pass
    return error


class RedactingStream:
    """A text stream that masks secrets in everything written to it (the CLI's stdout/stderr, so
    every line a command prints or logs goes out redacted); everything else is the stream's."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text):
        return self._stream.write(redact_text(text) if isinstance(text, str) else text)

    def writelines(self, lines):
        for line in lines:
            self.write(line)

    def __getattr__(self, name):
        return getattr(self._stream, name)


def redact_log_record(record) -> bool:
    """A logging filter: the record's message with the secrets masked (always passes it on)."""
    try:
        msg = record.getMessage()
    except Exception:  # noqa: BLE001 -- a malformed record is logging's to report
        return True
    masked = redact_text(msg)
    if masked != msg:
        record.msg, record.args = masked, None
    return True


def redact_values(value: Any) -> Any:
    """A JSON-like value with redact_text applied to every string in it (keys kept as they are):
    for summaries written beside a version."""
    if isinstance(value, dict):
        return {k: redact_values(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact_values(v) for v in value]
    return redact_text(value) if isinstance(value, str) else value
