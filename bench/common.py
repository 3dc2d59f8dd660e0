"""Small shared helpers: timing, quiet logging and the chunk texts of a version."""
from __future__ import annotations

import time
from contextlib import contextmanager


def quiet(*_args, **_kw) -> None:
    pass


class Timer:
    s: float = 0.0


@contextmanager
def timed():
    t = Timer()
    start = time.perf_counter()
    try:
        yield t
    finally:
        t.s = time.perf_counter() - start


def best_of(fn, repeats: int = 3) -> float:
    """Fastest of a few runs, in seconds: for sub-second timings that one hiccup would swamp."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def chunk_embed_texts(version_dir: str) -> list[str]:
    """What the index job embedded for each chunk: Chunk.embed_text, rebuilt from the shards."""
    from transforms.index.shards import CHUNKS_DIR, read_table

    t = read_table(version_dir, CHUNKS_DIR, ["chunk_id", "context", "text"]).sort_by("chunk_id")
    return [f"{c}\n{x}" if c else x for c, x in zip(t.column("context").to_pylist(), t.column("text").to_pylist())]
