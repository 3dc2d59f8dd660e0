"""Near-duplicate measurement on debian-docs: parse every file with the repo's parsers, sign,
detect at several thresholds, count merges, and check them against the corpus's known twins
(the same page as .html and .txt/.md). No index is built.

    python -m bench.studies.neardup_debian [--data ../shared/data/debian-docs] [--shingle 3] [--perm 128]
    python -m bench.studies.neardup_debian --chunks [--threshold 0.9]   # what the index job would save

With --chunks: documents are exact-deduped by content hash first (as the index job does),
every document is chunked with the default chunker settings (no embedding), and the chunks of
the merged members at --threshold are counted: the chunks the index job no longer embeds.
"""
from __future__ import annotations

import argparse
import collections
import posixpath
import time
from pathlib import Path

from bench.data import SHARED_DATA
from transforms.ingest.neardup import DocSignature, NearDupSettings, acl_key, find_near_duplicates, signature
from transforms.ingest.parse import ParseError, parse_object
from transforms.records import RawObject

THRESHOLDS = (0.8, 0.85, 0.9, 0.95)


def _twin_key(key: str) -> str:
    top, base = key.split("/")[0], posixpath.basename(key)
    return f"{top}/{base.rsplit('.', 1)[0]}"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    default = SHARED_DATA / "debian-docs"
    ap.add_argument("--data", default=str(default))
    ap.add_argument("--shingle", type=int, default=3)
    ap.add_argument("--perm", type=int, default=128)
    ap.add_argument("--chunks", action="store_true", help="count the chunks merged at --threshold")
    ap.add_argument("--threshold", type=float, default=0.9)
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
    if args.chunks:
        by_hash = {}
        for d in docs:
            by_hash.setdefault(d.content_hash, d)
        docs = sorted(by_hash.values(), key=lambda d: d.doc_id)
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
    if args.chunks:
        return _chunk_effect(docs, items, key_of, twins, args, len(files), t_parse)
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


def _chunk_effect(docs, items, key_of, twins, args, n_files, t_parse) -> None:
    from configs.schema import load_config
    from pipelines.index import chunk_settings
    from transforms.ingest.chunk import chunk_document
    from transforms.ingest.embed import model_spec_from_config
    from transforms.model.tokens import load_tokenizer
    cfg = load_config(environ={})
    spec = model_spec_from_config(cfg)
    tok, settings = load_tokenizer(spec.tokenizer_path), chunk_settings(cfg, spec)
    t0 = time.perf_counter()
    n_chunks = {d.doc_id: len(chunk_document(d, tok, settings)) for d in docs}
    t_chunk = time.perf_counter() - t0
    s = NearDupSettings(threshold=args.threshold, shingle_size=args.shingle, num_perm=args.perm)
    t0 = time.perf_counter()
    rows = find_near_duplicates(items, s)
    t_find = time.perf_counter() - t0
    pairs = {tuple(sorted((r.member, r.representative))) for r in rows}
    merged_chunks = sum(n_chunks[r.member] for r in rows)
    by_top = collections.Counter(key_of[r.member].split("/")[0] for r in rows)
    total = sum(n_chunks.values())
    print(f"{n_files} files -> {len(docs)} distinct documents, {total} chunks (parse {t_parse:.0f} s, "
          f"chunk {t_chunk:.0f} s)")
    print(f"threshold {args.threshold} (k={args.shingle}, {args.perm} perms, clustering {t_find:.1f} s): "
          f"{len(rows)} documents merged into {len({r.representative for r in rows})} representatives, "
          f"{merged_chunks} chunks not embedded ({100.0 * merged_chunks / max(total, 1):.1f}% of {total}); "
          f"by folder {dict(sorted(by_top.items()))}; known twins {len(pairs & twins)}/{len(twins)}; "
          f"other merges {sorted((key_of[a], key_of[b]) for a, b in pairs - twins)[:10]}")


if __name__ == "__main__":
    main()
