"""Peak RSS of EmbeddingCache.load + 1,000 lookups: the whole-load loader of Parquet files
(transforms/ingest/embed_cache.py at 275e382, read from git) against the memory-mapped .arrow
cache, each in its own process, on a synthetic cache (384-d vectors, ~8 int8 sentence vectors a
chunk, 20k entries a file). From the repository root:

    python -m bench.studies.cache_rss out/cache_rss 250000 [--full]

Measured 2026-12-06 (2 cores, shared): old 8,338-8,778 MB peak RSS, new 155 MB (35 MB anonymous);
with --full (every entry looked up once) 11.4 s against 2.5 s, load included.
"""
import importlib.util, json, os, subprocess, sys, time
import numpy as np

OLD_COMMIT = "275e382"  # the last commit whose cache was loaded whole


def old_module_path(data: str) -> str:
    path = os.path.join(data, "old_embed_cache.py")
    if not os.path.exists(path):
        src = subprocess.run(["git", "show", f"{OLD_COMMIT}:transforms/ingest/embed_cache.py"],
                             capture_output=True, text=True, check=True).stdout
        with open(path, "w") as f:
            f.write(src)
    return path
DIM, SENTS, ROWS_PER_FILE = 384, 8, 20_000


def make(data, n):
    import pyarrow as pa, pyarrow.parquet as pq
    from transforms.ingest.embed_cache import cache_key, cache_schema, convert_parquet_files
    pdir, adir = os.path.join(data, "parquet"), os.path.join(data, "arrow")
    if os.path.isdir(adir):
        return pdir, adir
    os.makedirs(pdir), os.makedirs(adir)
    rng = np.random.default_rng(0)
    for f, lo in enumerate(range(0, n, ROWS_PER_FILE)):
        m = min(ROWS_PER_FILE, n - lo)
        counts = rng.integers(SENTS - 3, SENTS + 4, m)  # ~8 a chunk
        off = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
        pos = (np.arange(off[-1]) * 40 % 2000).astype(np.int32)
        emb = rng.standard_normal((m, DIM)).astype(np.float32)
        sv = rng.integers(-127, 128, (off[-1], DIM), dtype=np.int8)
        t = pa.table({"key": [cache_key(f"chunk {lo + i}") for i in range(m)],
                      "embedding": pa.FixedSizeListArray.from_arrays(pa.array(emb.ravel()), DIM),
                      "sentence_starts": pa.ListArray.from_arrays(pa.array(off), pa.array(pos)),
                      "sentence_ends": pa.ListArray.from_arrays(pa.array(off), pa.array(pos + 30)),
                      "sentence_vectors": pa.ListArray.from_arrays(
                          pa.array(off), pa.FixedSizeListArray.from_arrays(pa.array(sv.ravel()), DIM))})
        t = t.cast(cache_schema(DIM))
        pq.write_table(t, os.path.join(pdir, f"v-{f:05d}.parquet"))
        pq.write_table(t, os.path.join(adir, f"v-{f:05d}.parquet"))
    convert_parquet_files(adir)  # the new form, as a commit or the next index run writes it
    return pdir, adir


def status():
    out = {}
    for line in open("/proc/self/status"):
        k, _, v = line.partition(":")
        if k in ("VmHWM", "VmRSS", "RssAnon", "RssFile"):
            out[k] = int(v.split()[0]) // 1024
    return out


def child(which, directory, n, lookups, full):
    if which == "old":
        spec = importlib.util.spec_from_file_location("old_embed_cache", old_module_path(os.path.dirname(directory)))
        mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
    else:
        import transforms.ingest.embed_cache as mod
    assert os.path.dirname(mod.__file__).startswith(os.getcwd()) or which == "old", mod.__file__
    t0 = time.perf_counter()
    cache = mod.EmbeddingCache.load(directory, DIM)
    load_s = time.perf_counter() - t0
    after_load = status()
    rng = np.random.default_rng(1)
    keys = [mod.cache_key(f"chunk {i}") for i in rng.integers(0, n, lookups)]
    t0 = time.perf_counter()
    hits = sum(cache.get(k) is not None and cache.get_sentences(k) is not None for k in keys)
    per_lookup_us = (time.perf_counter() - t0) / lookups / 2 * 1e6
    res = {"which": which, "entries": len(cache), "load_s": round(load_s, 2), "hits": hits,
           "us_per_lookup": round(per_lookup_us, 1), "after_load_MB": after_load,
           "after_lookups_MB": status(), "peak_rss_MB": status()["VmHWM"]}  # ru_maxrss would carry the parent's over exec
    if full:  # a full re-run: every entry looked up once (get + get_sentences), vectors copied
        t0 = time.perf_counter()
        for i in range(n):
            k = mod.cache_key(f"chunk {i}")
            v, s = cache.get(k), cache.get_sentences(k)
            np.array(v), np.array(s[1])
        res["full_pass_s"] = round(time.perf_counter() - t0, 1)
        res["after_full_pass_MB"] = status()
    print(json.dumps(res))


if __name__ == "__main__":
    sys.path.insert(0, os.getcwd())  # this checkout, not the editable install the venv points at
    if sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6] == "1")
        sys.exit(0)
    data, n = sys.argv[1], int(sys.argv[2])
    full = "--full" in sys.argv
    pdir, adir = make(data, n)
    if "--make-only" in sys.argv:
        sys.exit(0)
    for which, d in (("old", pdir), ("new", adir), ("new-on-parquet", pdir)):
        r = subprocess.run([sys.executable, "-m", "bench.studies.cache_rss", "--child", which.split("-")[0], d, str(n), "1000",
                            "1" if full else "0"], capture_output=True, text=True)
        print(which, r.stdout.strip() or r.stderr[-2000:], flush=True)
