"""The configuration reference, generated from the schema: every key with its dotted path, type,
default and meaning (each field's `description` in configs/schema.py, a section's its docstring).
The keys the schema marks `user` (json_schema_extra=USER) come first, in one table; the rest
follow under "Expert settings", section by section.

    python -m configs.reference            # writes docs/configuration-reference.md (make docs)
    python -m configs.reference --check    # exit 1 if the committed page and the schema disagree

The schema is the one source of truth: a key added without a description fails
tests/test_config_reference.py, and so does a page that was not regenerated.
"""
from __future__ import annotations

import argparse
import json
import sys
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from configs.schema import DEFAULT_CONFIG, Config
from transforms.common.redact import is_secret_path

PAGE = Path(__file__).resolve().parent.parent / "docs" / "configuration-reference.md"

HEADER = """# Configuration reference

<!-- Generated from configs/schema.py by `python -m configs.reference` (make docs); do not edit by hand.
     tests/test_config_reference.py fails when this page and the schema disagree. -->

Every key a config file may set, with its type, its default and what it does: first the
[user settings](#user-settings) that most index and answer jobs set, then the
[expert settings](#expert-settings), whose defaults were measured and rarely need changing.
`{default}` sets the defaults explicitly; a file need only name the keys it
changes. Every key is validated on load: an unknown key (with the nearest known name), a value
of the wrong type or out of range, or settings that cannot work together are refused with the
key named ([configuration.md](configuration.md)).

- **Environment variables in values.** Any string value may be written as `${{VAR}}` or
  `${{VAR:-default}}`; a `${{VAR}}` that is not set is a config error.
- **Overriding one key.** `RAGBEAM__SECTION__KEY=value` overrides one key, nested sections
  joined by `__` too: `RAGBEAM__S3__ENDPOINT_URL=http://127.0.0.1:8333`,
  `RAGBEAM__RETRIEVE__DENSE_TOP_N=100`. The value is a string, taken as written, that the
  schema converts where the key's type is a number or a boolean; for a list, a mapping or a
  section it is parsed as YAML/JSON (`RAGBEAM__ACL='[{{prefix: hr/, groups: [hr]}}]'`).
- **Secrets** (marked *secret*) have no default beyond null: give them through `${{VAR}}` or an
  override, never in a committed file. Their values are never echoed in errors, logged,
  written to a manifest or shown in reprs; nor are the values of `runner.options` entries whose
  name looks like a credential.
"""


def _type_name(ann: Any) -> str:
    """A key's type as a reader writes it: `integer`, `auto | exact`, `string or null`."""
    origin, args = typing.get_origin(ann), typing.get_args(ann)
    if origin is typing.Annotated:
        return _type_name(args[0])
    if origin is typing.Union:
        names = [_type_name(a) for a in args if a is not type(None)]
        return " or ".join(names) + (" or null" if type(None) in args else "")
    if origin is typing.Literal:
        return " | ".join(str(a) for a in args)
    if origin is list:
        inner = args[0] if args else Any
        if isinstance(inner, type) and issubclass(inner, BaseModel):
            return "list of {" + ", ".join(inner.model_fields) + "}"
        return f"list of {_type_name(inner)}s"
    if origin is dict:
        return "mapping"
    return {int: "integer", float: "number", str: "string", bool: "boolean"}.get(ann, getattr(ann, "__name__", str(ann)))


def _bounds(field) -> str:
    """The range a number must lie in, from the field's constraints (ge/gt/le/lt)."""
    lo = hi = None
    for m in field.metadata:
        for name, sign in (("ge", "≥"), ("gt", ">")):
            if getattr(m, name, None) is not None:
                lo = f"{sign} {getattr(m, name)}"
        for name, sign in (("le", "≤"), ("lt", "<")):
            if getattr(m, name, None) is not None:
                hi = f"{sign} {getattr(m, name)}"
    return ", ".join(b for b in (lo, hi) if b)


def _default(field, secret: bool) -> str:
    if field.is_required():
        return "required"
    value = field.get_default(call_default_factory=True)
    if secret or value is None:
        return "null"
    if isinstance(value, BaseModel):
        return "(section)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int) and value >= 1 << 20 and value % (1 << 20) == 0:
        return f"{value} ({value >> 20} MiB)"
    if isinstance(value, (list, dict)):
        return json.dumps(value)
    return str(value)


def _model_of(ann: Any):
    """The section model a field holds (itself, or inside Optional[...]), or None."""
    for a in (ann, *typing.get_args(ann)):
        if isinstance(a, type) and issubclass(a, BaseModel):
            return a
    return None


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def keys(model: type[BaseModel] = Config, prefix: tuple = ()) -> list[dict]:
    """Every key below `model` (sections flattened), in schema order: path, type, default,
    meaning, secret, user."""
    out = []
    for name, field in model.model_fields.items():
        path = prefix + (name,)
        sub = _model_of(field.annotation)
        if sub is not None and typing.get_origin(field.annotation) is not list:
            out.extend(keys(sub, path))
            continue
        secret = is_secret_path(path)
        kind = _type_name(field.annotation)
        if _bounds(field):
            kind += f" ({_bounds(field)})"
        extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
        out.append({"path": ".".join(path), "type": kind, "default": _default(field, secret),
                    "meaning": field.description or "", "secret": secret, "user": bool(extra.get("user"))})
        item = typing.get_args(field.annotation)[0] if typing.get_origin(field.annotation) is list else None
        if isinstance(item, type) and issubclass(item, BaseModel):  # acl: the fields of one rule
            out.extend(keys(item, prefix + (f"{name}[]",)))
    return out


def _sections() -> list[tuple[str, str]]:
    """(section name, its one-line docstring) for each top-level key of Config."""
    out = []
    for name, field in Config.model_fields.items():
        item = typing.get_args(field.annotation)[0] if typing.get_origin(field.annotation) is list else None
        model = _model_of(field.annotation) if item is None else item
        doc = (model.__doc__ or "").strip().splitlines()[0] if model and model.__doc__ else field.description or ""
        if not field.is_required() and field.default is None:  # an optional section, e.g. gate
            doc += f" Optional: null by default ({field.description})."
        out.append((name, doc))
    return out


def _table(rows: list[dict]) -> list[str]:
    lines = ["| key | type | default | meaning |", "|---|---|---|---|"]
    for k in rows:
        meaning = ("*secret*; " if k["secret"] else "") + k["meaning"]
        default = "*required*" if k["default"] == "required" else f"`{_cell(k['default'])}`"
        lines.append(f"| `{k['path']}` | {_cell(k['type'])} | {default} | {_cell(meaning)} |")
    return lines


def _in_section(path: str, section: str) -> bool:
    return path == section or path.startswith((section + ".", section + "[]."))


def user_keys() -> list[dict]:
    """The keys the schema marks for users, in schema order."""
    return [k for k in keys() if k["user"]]


def render() -> str:
    """The whole reference page, as `python -m configs.reference` writes it."""
    lines = [HEADER.format(default=DEFAULT_CONFIG.relative_to(PAGE.parent.parent).as_posix())]
    all_keys = keys()
    lines += ["## User settings", "",
              "The runner and its workers, object storage, OCR, who may see what, the chunk size and the model, the "
              "versions kept, and how answers are given and written. The input, the index and the question and "
              "answer files are named on the command line ([README](../README.md#commands)).", ""]
    lines += _table(user_keys()) + [""]
    lines += ["## Expert settings", "",
              "Everything else, section by section. The defaults are the measured ones "
              "([evaluation](evaluation.md), [answering](answering.md)); a fitted key left unset follows the "
              "embedding profile's fit ([models](models.md)).", ""]
    for section, doc in _sections():
        lines += [f"### `{section}`", ""]
        if doc:
            lines += [doc, ""]
        rest = [k for k in all_keys if _in_section(k["path"], section) and not k["user"]]
        users = [k["path"] for k in all_keys if _in_section(k["path"], section) and k["user"]]
        if users:
            lines += ["In the [user settings](#user-settings): " + ", ".join(f"`{u}`" for u in users) + ".", ""]
        if rest:
            lines += _table(rest) + [""]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m configs.reference", description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare with the committed page; exit 1 if they differ")
    ap.add_argument("--out", default=str(PAGE), help=f"where to write the page (default {PAGE.name} in docs/)")
    a = ap.parse_args(argv)
    text, out = render(), Path(a.out)
    if a.check:
        same = out.exists() and out.read_text(encoding="utf-8") == text
        print(f"{out}: {'up to date' if same else 'out of date: run python -m configs.reference'}")
        return 0 if same else 1
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    print(f"wrote {out} ({len(keys())} keys)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
