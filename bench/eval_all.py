"""Retrieval (and answer) quality on every dataset in ../shared/data, as one table.

    python -m bench.eval_all [--data ../shared/data] [--out out/eval] [--table-only]

Runs `ragbeam eval` per dataset on the default config, indexing each corpus into
<out>/<name>/index unless an index is already there (then it is reused), and writes
bench/results/eval.md. --table-only rebuilds the table from existing reports.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parent.parent
# (report name, dataset folder, extra eval arguments). Every set runs on the default config,
# so the "final" stage is exactly what `ragbeam answer` writes with the defaults (no reranker:
# the embedding reranker lowered nDCG@10 on every set it was measured on; configs/eval-rerank.yaml
# measures it: `ragbeam eval --config configs/eval-rerank.yaml ...`).
DATASETS = [
    ("cranfield", "cranfield", []),
    ("vaswani", "vaswani-npl", []),
    ("msmarco", "msmarco-trecdl19-subset", []),
    ("squad", "squad-dev-half", ["--max-queries", "500"]),
    ("debian-docs", "debian-docs", ["--max-queries", "300"]),
]
STAGES = ("bm25", "dense", "hybrid", "final")


def run(data: Path, out: Path, only: Optional[set] = None) -> None:
    for name, folder, extra in DATASETS:
        if only and name not in only:
            continue
        if not (data / folder).exists():
            print(f"skip {name}: {data / folder} not found")
            continue
        cmd = [sys.executable, "-m", "pipelines.cli", "eval", "--quiet", "--dataset", str(data / folder),
               "--output", str(out / name)] + extra
        print("+", " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True, cwd=ROOT)


def _f(x) -> str:
    return "-" if x is None else f"{x:.3f}"


def table(out: Path) -> str:
    lines = ["| dataset (queries) | BM25 floor | stage | nDCG@10 | R@10 | R@100 | MRR@10 |",
             "|---|---:|---|---:|---:|---:|---:|"]
    notes = []
    for name, _, _ in DATASETS:
        path = out / name / "report.json"
        if not path.exists():
            continue
        r = json.loads(path.read_text())
        floors = r.get("bm25_floor_ndcg@10") or {}
        blocks = [(f"{name} ({r['counts']['queries_evaluated']})", floors.get("all"), r["stages"])]
        for g, gs in (r.get("groups") or {}).items():
            blocks.append((f"{name}: {g} ({gs['queries']})", floors.get(g), gs["stages"]))
        for label, floor, stages in blocks:
            for i, st in enumerate(STAGES):
                m = stages.get(st, {})
                best = max(stages[s].get("ndcg@10", 0) for s in STAGES if s in stages)
                nd = _f(m.get("ndcg@10"))
                nd = f"**{nd}**" if m.get("ndcg@10") == best else nd
                lines.append(f"| {label if i == 0 else ''} | {_f(floor) if i == 0 else ''} | {st} | {nd} | "
                             f"{_f(m.get('recall@10'))} | {_f(m.get('recall@100'))} | {_f(m.get('mrr@10'))} |")
        if r.get("answers"):
            a = r["answers"]
            u = r.get("unanswerable") or {}
            notes.append(f"{name} answers (threshold {a.get('threshold')}): gold span in answer "
                         f"{_f(a.get('gold_span_in_answer'))}, not-found on answerable {_f(a.get('not_found_on_answerable'))}, "
                         f"not-found on unanswerable {_f(u.get('not_found_rate', u.get('not_found')))}, "
                         f"citation precision {_f((r.get('triage') or {}).get('citation_precision'))}")
    return "\n".join(lines) + "\n\n" + "\n".join(f"- {n}" for n in notes) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    ap.add_argument("--out", default=str(ROOT / "out" / "eval"))
    ap.add_argument("--table-only", action="store_true")
    ap.add_argument("--only", default="", help="comma-separated report names (default: every dataset)")
    args = ap.parse_args(argv)
    if not args.table_only:
        run(Path(args.data), Path(args.out), {n for n in args.only.split(",") if n} or None)
    md = table(Path(args.out))
    (ROOT / "bench" / "results").mkdir(parents=True, exist_ok=True)
    (ROOT / "bench" / "results" / "eval.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
