"""One job in a fresh process, so its peak RSS is its own: prints one JSON line.

  python -m bench.job floor  --config C                    imports + model load + one encode
  python -m bench.job index  --config C --input DIR --index DIR
  python -m bench.job answer --config C --index DIR --questions F --output F
  python -m bench.job encode --config C --input FILE.jsonl --batch N   Embedder.encode of the docs' texts
"""
from __future__ import annotations

import argparse
import json
import sys
import time


def peak_rss_mb() -> float:
    """This process's peak RSS. VmHWM belongs to the address space exec() made, whereas
    ru_maxrss carries over the parent's RSS at fork time (a 1.5 GB bench parent made every
    job read 1.5 GB). Beam's in_memory runner is in-process, so this covers the job; a
    multi-process runner's workers would not be counted."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0  # kB
    except OSError:
        pass
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.job")
    ap.add_argument("kind", choices=["floor", "index", "answer", "encode"])
    ap.add_argument("--config")
    ap.add_argument("--input")
    ap.add_argument("--index")
    ap.add_argument("--questions")
    ap.add_argument("--output")
    ap.add_argument("--batch", type=int, default=32)
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
        from transforms.ingest.embed import Embedder, model_spec_from_config
        Embedder(model_spec_from_config(cfg)).encode(["warm up the session"] * 8)
    elif a.kind == "encode":
        from transforms.ingest.embed import Embedder, model_spec_from_config
        with open(a.input, encoding="utf-8") as f:
            texts = [json.loads(line)["text"] for line in f]
        Embedder(model_spec_from_config(cfg)).encode(texts, batch_size=a.batch)
        out.update(texts=len(texts), batch=a.batch)
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
