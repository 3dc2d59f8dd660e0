"""`make bench-check`: every reported figure against the committed results it was read from.

    python -m bench.check [--run] [--only NAME,...] [EXPECTED.yaml ...]

Each bench/expected/*.yaml names a command, the results file it writes, and its figures:

    command: python -m bench.run
    results: bench/results/bench.json
    figures:
    - name: index pipeline chunks/s over bare Embedder.encode
      at: 'figures[figure=chunks embedded/s, index pipeline (1488 chunks)].ratio'
      over: ...          # optional: the value is at / over (a timing as a ratio)
      value: 0.78        # as the page reports it
      tolerance: 30%     # relative ('N%') or absolute (a number)
      page: docs/benchmarks.md
      text: 0.78×        # the page must still show it (whitespace runs count as one space)

A figure may name its own `command` and `results`; `rerun: false` marks a file whose command is a
recipe run by hand. `at` walks the JSON (a .jsonl file is its list
of rows, a .md file the rows of its tables, blank cells taking the row above's): `.key`,
`."key.with.dots"`, `[3]`, and `[k=v&k2=v2]` (the first row whose fields print as those values);
`match: REGEX` reads its first group from the file's text instead. Exit 1 with one line a figure
that drifted past its tolerance, is missing, or is no longer shown; --run first reruns each
command (from the repository root), which for the dev-set figures takes hours.
"""
from __future__ import annotations

import argparse
import glob
import json
import math
import os
import re
import subprocess
import sys

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXPECTED = os.path.join(ROOT, "bench", "expected")
_STEP = re.compile(r'\[([^\]]*)\]|"([^"]*)"|([^.\[\]"]+)')


class Missing(Exception):
    pass


def load_results(path: str):
    """A results file as data: JSON, JSON lines (a list of rows), Markdown tables (a list of rows)."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if path.endswith(".json"):
        return json.loads(text)
    if path.endswith(".jsonl"):
        return [json.loads(x) for x in text.splitlines() if x.strip()]
    rows, header, last = [], None, {}
    for line in text.splitlines():
        if not line.startswith("|"):
            header = None
            continue
        cells = [c.strip().replace("**", "") for c in line.strip().strip("|").split("|")]
        if header is None:
            header, last = cells, {}
        elif not all(set(c) <= set("-: ") for c in cells):
            row = {h: (c or last.get(h, "")) for h, c in zip(header, cells)}
            rows.append(row)
            last = row
    return rows


def walk(data, at: str):
    for sel, quoted, key in _STEP.findall(at):
        if key or quoted:
            k = key or quoted
            if not isinstance(data, dict) or k not in data:
                raise Missing(f"no {k!r}")
            data = data[k]
        elif sel.strip().lstrip("-").isdigit():
            i = int(sel)
            if not isinstance(data, list) or not -len(data) <= i < len(data):
                raise Missing(f"no row {i}")
            data = data[i]
        else:
            want = dict(p.split("=", 1) for p in sel.split("&"))
            rows = [r for r in (data if isinstance(data, list) else [])
                    if isinstance(r, dict) and all(str(r.get(k)) == v for k, v in want.items())]
            if not rows:
                raise Missing(f"no row [{sel}]")
            data = rows[0]
    return data


def number(x) -> float:
    if isinstance(x, bool) or x is None:
        raise Missing(f"not a number: {x!r}")
    if isinstance(x, str):
        m = re.search(r"-?[\d,]*\.?\d+", x)
        if not m:
            raise Missing(f"not a number: {x!r}")
        x = m.group().replace(",", "")
    return float(x)


def measured(fig: dict, results: str, cache: dict) -> float:
    path = os.path.join(ROOT, results) if not os.path.isabs(results) else results
    if path not in cache:
        try:
            cache[path] = (load_results(path), open(path, encoding="utf-8").read())
        except FileNotFoundError:
            cache[path] = None
    if cache[path] is None:
        raise Missing(f"{results} does not exist")
    data, text = cache[path]
    if "match" in fig:
        m = re.search(fig["match"], text)
        if not m:
            raise Missing(f"{fig['match']!r} not found")
        return number(m.group(1))
    value = number(walk(data, fig["at"]))
    if "over" in fig:
        value /= number(walk(data, fig["over"]))
    return value


def within(got: float, want: float, tolerance) -> bool:
    if isinstance(tolerance, str) and tolerance.endswith("%"):
        return abs(got - want) <= abs(want) * float(tolerance[:-1]) / 100
    return abs(got - want) <= float(tolerance) + 1e-12


def _squash(s: str) -> str:
    return re.sub(r"\s+", " ", s)


def check_file(path: str, results_root: str | None = None, only_results: str | None = None) -> list[str]:
    """One line per figure of this expected file that drifted, is missing or is no longer shown.
    results_root: where the results paths are resolved (default the repository); only_results:
    check only the figures read from this results path."""
    spec = yaml.safe_load(open(path, encoding="utf-8"))
    name = os.path.relpath(path, ROOT)
    out, cache = [], {}
    for fig in spec["figures"]:
        results = fig.get("results", spec.get("results"))
        if only_results and os.path.normpath(results) != os.path.normpath(only_results):
            continue
        where = os.path.join(results_root, results) if results_root else results
        label = f"{name}: {fig['name']}"
        try:
            got = measured(fig, where, cache)
        except Missing as e:
            out.append(f"{label}: missing in {results} ({e})")
            continue
        if not math.isfinite(got) or not within(got, fig["value"], fig["tolerance"]):
            out.append(f"{label}: {got:.6g} in {results}, expected {fig['value']} ± {fig['tolerance']}")
        page = fig.get("page")
        if page:
            shown = _squash(open(os.path.join(ROOT, page), encoding="utf-8").read())
            if _squash(str(fig["text"])) not in shown:
                out.append(f"{label}: {page} no longer shows {fig['text']!r}")
    return out


def expected_files(names=()) -> list[str]:
    files = sorted(glob.glob(os.path.join(EXPECTED, "*.yaml")))
    return [f for f in files if not names or os.path.splitext(os.path.basename(f))[0] in names]


def check_results(results: str) -> list[str]:
    """Every expected figure read from this results file (a path relative to the repository);
    `make bench` calls it on what it wrote."""
    rel = os.path.relpath(os.path.abspath(results), ROOT)
    return [line for f in expected_files() for line in check_file(f, only_results=rel)]


def rerun(files: list[str]) -> None:
    """Each distinct command once, in the order the figures name them; a file with `rerun: false`
    names a recipe run by hand (printed, not run)."""
    commands = []
    for f in files:
        spec = yaml.safe_load(open(f, encoding="utf-8"))
        for fig in spec["figures"]:
            c = (fig.get("command", spec.get("command")), spec.get("rerun", True))
            if c not in commands:
                commands.append(c)
    for c, runnable in commands:
        if not runnable:
            print(f"bench-check: not rerun (by hand): {c}", flush=True)
            continue
        print(f"bench-check: running {c}", flush=True)
        subprocess.run(c, shell=True, cwd=ROOT, check=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.check", description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*", help="expected files (default bench/expected/*.yaml)")
    ap.add_argument("--only", default="", help="expected files by name, e.g. bench,eval")
    ap.add_argument("--run", action="store_true", help="rerun each figure's command first (hours)")
    a = ap.parse_args(argv)
    files = a.files or expected_files([n for n in a.only.split(",") if n])
    if a.run:
        rerun(files)
    problems = [line for f in files for line in check_file(f)]
    figures = sum(len(yaml.safe_load(open(f, encoding="utf-8"))["figures"]) for f in files)
    for line in problems:
        print(line)
    print(f"bench-check: {figures} figures in {len(files)} files, {len(problems)} problems", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
