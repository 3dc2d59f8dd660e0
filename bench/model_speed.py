"""Embedding speed per profile: passages per second on chunk-sized texts.

    python -m bench.model_speed [--profiles minilm,minilm-q8,bge-small,e5-small] [--n 500] [--threads 2]

The first --n documents of cranfield, each cut to --tokens word pieces (a chunk's size on the
default config), embedded as passages by Embedder.encode at the config's batch size after
one warm-up batch; the best of --repeats runs, since the machine is shared.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def chunk_texts(corpus: Path, n: int, tokens: int) -> list[str]:
    from transforms.model.tokens import load_tokenizer, truncate_to_tokens
    tok = load_tokenizer(None)
    texts = []
    with open(corpus, encoding="utf-8") as f:
        for line in f:
            d = json.loads(line)
            text = d.get("text") or d.get("title") or ""  # cranfield texts begin with their title
            if text.strip():
                texts.append(truncate_to_tokens(tok, text, tokens))
            if len(texts) >= n:
                break
    return texts


def passages_per_s(profile: str, texts: list[str], threads: int, batch: int, repeats: int) -> float:
    import dataclasses

    from configs.schema import load_config
    from transforms.ingest.embed import Embedder, model_spec_from_config
    spec = model_spec_from_config(load_config(None, environ={"RAGBEAM__EMBED__PROFILE": profile}))
    emb = Embedder(dataclasses.replace(spec, intra_op_threads=threads))
    emb.encode(texts[:batch], batch_size=batch)  # warm-up: session arenas, thread pool
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        emb.encode(texts, batch_size=batch)
        best = min(best, time.perf_counter() - t)
    return len(texts) / best


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profiles", default="minilm,minilm-q8,bge-small,e5-small")
    ap.add_argument("--corpus", default=str(ROOT.parent / "shared" / "data" / "cranfield" / "corpus.jsonl"))
    ap.add_argument("--n", type=int, default=500)
    ap.add_argument("--tokens", type=int, default=200)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args(argv)
    texts = chunk_texts(Path(args.corpus), args.n, args.tokens)
    print(f"{len(texts)} passages of <= {args.tokens} word pieces, {args.threads} threads, batch {args.batch}")
    print("| profile | passages/s |\n|---|---:|")
    for p in args.profiles.split(","):
        print(f"| {p} | {passages_per_s(p, texts, args.threads, args.batch, args.repeats):.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
