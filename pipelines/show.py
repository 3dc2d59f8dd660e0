"""Print a few answers with their sources, for people reading a terminal."""
from __future__ import annotations

import json
import textwrap


def show_answers(path: str, n: int) -> None:
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f):
            if i >= n:
                break
            r = json.loads(line)
            print(f"\nQ [{r['id']}] {r['question']}")
            print(textwrap.indent(textwrap.fill(r["answer"] or f"({r['status']}: {r.get('error')})", 100), "  "))
            for c in r["citations"]:
                print(f"    [{c['n']}] {c['source']}")
