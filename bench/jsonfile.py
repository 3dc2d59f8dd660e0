"""Results JSON written compactly: objects and lists opened one level a line down to `depth`
(deeper ones, and any that fit in `width` characters, on one line), so a results file reads as one
row a line and `json.load` gives back exactly what was written."""
from __future__ import annotations

import json
from pathlib import Path


def dumps(obj, depth: int = 2, width: int = 100, default=None) -> str:
    def enc(o, level: int) -> str:
        flat = json.dumps(o, ensure_ascii=False, default=default)
        if not isinstance(o, (dict, list)) or not o or level >= depth or len(flat) + level <= width:
            return flat
        pad = " " * (level + 1)
        if isinstance(o, dict):
            items = [f"{pad}{json.dumps(str(k), ensure_ascii=False)}: {enc(v, level + 1)}" for k, v in o.items()]
            return "{\n" + ",\n".join(items) + "\n" + " " * level + "}"
        return "[\n" + ",\n".join(pad + enc(v, level + 1) for v in o) + "\n" + " " * level + "]"

    return enc(obj, 0) + "\n"


def write_json(path, obj, **kw) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dumps(obj, **kw), encoding="utf-8")
    return path
