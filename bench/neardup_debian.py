"""Near-duplicate measurement on debian-docs: parse every file with the repo's parsers, sign,
detect at several thresholds, count merges, and check them against the corpus's known twins
(the same page as .html and .txt/.md). No index is built.

    python -m bench.neardup_debian [--data ../shared/data/debian-docs] [--shingle 3] [--perm 128]
"""
from __future__ import annotations

import argparse
import collections
import posixpath
import time
from pathlib import Path

from transforms.ingest.neardup import DocSignature, NearDupSettings, acl_key, find_near_duplicates, signature
from transforms.ingest.parse import ParseError, parse_object
from transforms.records import RawObject

THRESHOLDS = (0.8, 0.85, 0.9, 0.95)


def _twin_key(key: str) -> str:
    top, base = key.split("/")[0], posixpath.basename(key)
    return f"{top}/{base.rsplit('.', 1)[0]}"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    default = Path(__file__).resolve().parents[1].parent / "shared/data/debian-docs"
    ap.add_argument("--data", default=str(default))
    ap.add_argument("--shingle", type=int, default=3)
    ap.add_argument("--perm", type=int, default=128)
    args = ap.parse_args(argv)
    root = Path(args.data) / "docs"
    files = sorted(p for p in root.rglob("*") if p.is_file())
    t0 = time.perf_counter()
    docs = []
    for p in files:
        key = str(p.relative_to(root))
        try:
            docs.extend(parse_object(RawObject.from_bytes(str(p), key, p.read_bytes())))
        except ParseError:
            pass
    t_parse = time.perf_counter() - t0
    base = NearDupSettings(shingle_size=args.shingle, num_perm=args.perm)
    t0 = time.perf_counter()
    sigs = [(d, signature(d.text, base)) for d in docs]
    t_sign = time.perf_counter() - t0
    items = [DocSignature(d.doc_id, acl_key(d.acl), s) for d, s in sigs if s is not None]
    key_of = {d.doc_id: d.key for d in docs}
    by_twin = collections.defaultdict(list)
    for d in docs:
        if d.key.split("/")[0] in ("git", "nodejs"):
            by_twin[_twin_key(d.key)].append(d.doc_id)
    twins = {tuple(sorted(v)) for v in by_twin.values() if len(v) == 2}
    print(f"{len(files)} files -> {len(docs)} documents; parse {t_parse:.1f} s, "
          f"sign {t_sign:.1f} s (k={args.shingle}, {args.perm} permutations)")
    for thr in THRESHOLDS:
        t0 = time.perf_counter()
        rows = find_near_duplicates(items, NearDupSettings(threshold=thr, shingle_size=args.shingle,
                                                           num_perm=args.perm))
        dt = time.perf_counter() - t0
        pairs = {tuple(sorted((r.member, r.representative))) for r in rows}
        other = sorted((key_of[a], key_of[b]) for a, b in pairs - twins)
        print(f"threshold {thr}: {len(rows)} documents merged into "
              f"{len({r.representative for r in rows})} representatives ({dt:.1f} s); "
              f"git/nodejs twins {len(pairs & twins)}/{len(twins)}; other merges {len(other)}: {other[:6]}")


if __name__ == "__main__":
    main()
