"""The nightly run's cost: a full index of a corpus, then 1% of its files changed and re-indexed.

    python -m bench.nightly_cost [--corpus DIR] [--percent 1] [--out bench/results]

Defaults to ../shared/data/debian-docs/docs (1,838 files) when present, else the
repo's samples/corpus. The corpus is copied to a scratch dir first (the source is
read-only and must not change). Prints the full run's summary, the incremental
run's, and their ratio; writes nightly.json and nightly.md under --out.
"""
from __future__ import annotations

import argparse
import os
import random
import shutil
import tempfile
import time
from pathlib import Path

from bench.jsonfile import write_json

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CORPUS = ROOT.parent / "shared" / "data" / "debian-docs" / "docs"


def change_file(path: Path, n: int) -> None:
    """A real edit in each format's own syntax, so the file still parses."""
    text = path.read_text(encoding="utf-8", errors="replace")
    note = f"Nightly change {n}: this paragraph was added to measure incremental re-indexing."
    if path.suffix in (".html", ".htm") and "</body>" in text:
        text = text.replace("</body>", f"<p>{note}</p></body>", 1)
    elif text.startswith((".", "'\\\"")):  # man page
        text += f"\n.SH NIGHTLY\n{note}\n"
    else:
        text += f"\n\n{note}\n"
    os.chmod(path, 0o644)
    path.write_text(text, encoding="utf-8")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", default=str(DEFAULT_CORPUS if DEFAULT_CORPUS.exists() else ROOT / "samples/corpus"))
    ap.add_argument("--percent", type=float, default=1.0)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--config", default=None)
    ap.add_argument("--keep-index", default=None,
                    help="also keep a copy of the full run's index at this path, e.g. for `ragbeam eval --index`")
    args = ap.parse_args(argv)

    from configs.schema import load_config
    from pipelines.index import run_index
    from transforms.index.manifest import format_summary

    cfg = load_config(args.config)
    scratch = Path(tempfile.mkdtemp(prefix="ragbeam-nightly-"))
    try:
        corpus = scratch / "corpus"
        shutil.copytree(args.corpus, corpus)
        for p in corpus.rglob("*"):
            os.chmod(p, 0o755 if p.is_dir() else 0o644)
        index = scratch / "index"
        print(f"full run over {args.corpus} ...", flush=True)
        full = run_index(cfg, str(corpus), str(index), progress=True)
        print(format_summary(full), flush=True)
        if args.keep_index:  # the full run's index, unchanged, for `ragbeam eval --index`
            shutil.rmtree(args.keep_index, ignore_errors=True)
            shutil.copytree(index, args.keep_index)

        files = sorted(p for p in corpus.rglob("*") if p.is_file() and p.suffix != ".pdf")
        rng = random.Random(0)
        picked = rng.sample(files, max(1, round(len(files) * args.percent / 100)))
        time.sleep(1.1)  # a new mtime even on filesystems with 1 s resolution
        for i, p in enumerate(picked):
            change_file(p, i)
        print(f"\nchanged {len(picked)} of {len(files)} files ({args.percent}%); nightly run ...", flush=True)
        nightly = run_index(cfg, str(corpus), str(index), progress=True)
        print(format_summary(nightly), flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    keys = ("listed", "read", "parsed", "chunks", "embedded", "cache_hits", "carried_documents", "wall_s")
    result = {"corpus": args.corpus, "changed_files": len(picked), "percent": args.percent,
              "full": {k: full.get(k) for k in keys + ("pipeline_s",)},
              "nightly": {k: nightly.get(k) for k in keys + ("pipeline_s", "changed")}}
    rows = [("files read", "read"), ("files parsed", "parsed"), ("chunks embedded", "embedded"),
            ("chunks from the embedding cache", "cache_hits"), ("wall time (s)", "wall_s")]
    md = [f"| {len(picked)} of {full['listed']} files changed ({args.percent:g}%) | full run | nightly run | nightly / full |",
          "|---|---:|---:|---:|"]
    for label, k in rows:
        f, n = full.get(k) or 0, nightly.get(k) or 0
        md.append(f"| {label} | {f} | {n} | {n / f:.3f} |" if f else f"| {label} | {f} | {n} | - |")
    os.makedirs(args.out, exist_ok=True)
    write_json(Path(args.out, "nightly.json"), result)
    Path(args.out, "nightly.md").write_text("\n".join(md) + "\n")
    print("\n" + "\n".join(md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
