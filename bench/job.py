"""One job in a fresh process, so its peak RSS is its own: prints one JSON line.

  python -m bench.job floor  --config C                    imports + model load + one encode
  python -m bench.job index  --config C --input DIR --index DIR
  python -m bench.job answer --config C --index DIR --questions F --output F
"""
from __future__ import annotations

import argparse
import json
import resource
import sys
import time


def peak_rss_mb() -> float:
    # Linux reports ru_maxrss in KiB. Beam's in_memory runner is in-process, but count
    # children too in case a config picks a multi-process runner.
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return max(own, kids) / 1024.0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.job")
    ap.add_argument("kind", choices=["floor", "index", "answer"])
    ap.add_argument("--config")
    ap.add_argument("--input")
    ap.add_argument("--index")
    ap.add_argument("--questions")
    ap.add_argument("--output")
    a = ap.parse_args(argv)

    from configs.schema import load_config
    cfg = load_config(a.config)
    quiet = lambda *_: None  # noqa: E731
    started = time.monotonic()
    out: dict = {"kind": a.kind}
    if a.kind == "floor":
        import apache_beam  # noqa: F401  what every job imports
        import pipelines.answer  # noqa: F401
        import pipelines.index  # noqa: F401
        from transforms.embed import Embedder, model_spec_from_config
        Embedder(model_spec_from_config(cfg)).encode(["warm up the session"] * 8)
    elif a.kind == "index":
        from pipelines.index import run_index
        s = run_index(cfg, a.input, a.index, progress=False, log=quiet)
        out.update(documents=s["documents"], chunks=s["chunks"], embedded=s["embedded"])
    else:
        from pipelines.answer import run_answer
        s = run_answer(cfg, a.index, a.questions, a.output, progress=False, log=quiet)
        out.update(questions=s["questions_written"], answered=s["answered"])
    out.update(wall_s=round(time.monotonic() - started, 2), peak_rss_mb=round(peak_rss_mb(), 1))
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
