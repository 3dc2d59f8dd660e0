"""Near-duplicate detection on the BEIR dev sets (corpus.jsonl): how many records the index job
would merge at the default settings. Records are signed as the index job signs a JSONL record's
text; no index is built. Zero merges means the near-dedupe stage leaves that set's index as is.

    python -m bench.studies.neardup_devsets [--data ../shared/data] [--threshold 0.9]
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from bench.data import SHARED_DATA
from transforms.ingest.neardup import DocSignature, NearDupSettings, find_near_duplicates, signature

SETS = ("cranfield", "vaswani-npl", "msmarco-trecdl19-subset", "squad-dev-half")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=str(SHARED_DATA))
    ap.add_argument("--threshold", type=float, default=0.9)
    args = ap.parse_args(argv)
    s = NearDupSettings(threshold=args.threshold)
    for name in SETS:
        path = Path(args.data) / name / "corpus.jsonl"
        if not path.exists():
            continue
        t0 = time.perf_counter()
        recs = [json.loads(line) for line in path.open(encoding="utf-8") if line.strip()]
        items, text_of = [], {}
        for r in recs:
            text = "\n\n".join(x for x in (r.get("title"), r.get("text")) if x)
            sig = signature(text, s)
            text_of[str(r["_id"])] = text
            if sig is not None:
                items.append(DocSignature(str(r["_id"]), "", sig))
        rows = find_near_duplicates(items, s)
        identical = sum(1 for r in rows if text_of[r.member] == text_of[r.representative])
        print(f"{name}: {len(recs)} records, {len(items)} signed, {len(rows)} near-duplicates "
              f"({identical} with identical text) in {time.perf_counter() - t0:.1f} s; "
              f"e.g. {[(r.member, r.representative, r.similarity) for r in rows[:5]]}")


if __name__ == "__main__":
    main()
