"""`make bench-scale`: segmented indexes at 100k..1M+ chunks on this machine.

python -m bench.scale_bench [--sizes 250000,1000000] [--segment 250000] [--questions 500]
                            [--nightly 300000] [--out bench/results/scale.json]

Synthetic versions made from real chunk rows (bench/scale_data.py: the sample corpus indexed
once with the real pipeline, rows replicated with fresh ids and perturbed unit vectors; the
embedding model is skipped for the rows, not for the questions). Per size, each in its own
process so its peak RSS is its own:
  build    the version's segments from its shards (pipelines.segments.rebuild_segments: the
           Beam segment pipeline on the in-process runner), from scratch
  answer   the answer job (pipelines.answer.run_answer: scatter/gather over the segments) on
           `--questions` questions made from the rows' first sentences
  nightly  (sizes in --nightly) a new version with 1% of the documents changed, segmented
           against the live one: reuse, tombstones and new segments only
Writes a list of rows (chunks, segments, answer_peak_rss_mb, build_peak_rss_mb, artifact_s,
answer_qps, and for nightly rows nightly_artifact_s) to --out, and a table beside it (.md).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time

from bench.jsonfile import write_json

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORK = os.path.join(ROOT, "out", "scale")


def _cfg(segment: int):
    from configs.schema import load_config
    return load_config(environ={"RAGBEAM__INDEX__SEGMENT_MAX_CHUNKS": str(segment)})


def _make_index(n: int, seed: int = 0) -> str:
    """out/scale/idx-<n>/ holding one synthetic version (made once, reused by later runs)."""
    from bench.scale_data import make_source_rows, write_synthetic_version
    idx = os.path.join(WORK, f"idx-{n}")
    name = f"v{n}"
    vdir = os.path.join(idx, "versions", name)
    if not os.path.exists(os.path.join(vdir, "manifest.json")):
        shutil.rmtree(idx, ignore_errors=True)
        write_synthetic_version(make_source_rows(), vdir, n, seed=seed)
    with open(os.path.join(idx, "CURRENT"), "w", encoding="utf-8") as f:
        f.write(name + "\n")
    return idx


BYTES_PER_CHUNK = 8_000  # measured: idx-1000000 (shards + segments) is 7.6 GB


def _disk_short(n: int) -> str:
    """Why a synthetic version of n chunks does not fit the disk ('' when it does or is made)."""
    if os.path.exists(os.path.join(WORK, f"idx-{n}", "versions", f"v{n}", "manifest.json")):
        return ""
    need, free = 1.2 * n * BYTES_PER_CHUNK, shutil.disk_usage(WORK).free
    return "" if free > need else f"needs ~{need / 1e9:.0f} GB, {free / 1e9:.0f} GB free"


def _questions(path: str, n: int) -> str:
    from bench.scale_data import make_source_rows
    from transforms.common.sentences import split_sentences
    rows = make_source_rows().column("text").to_pylist()
    qs = []
    for i, t in enumerate(rows * (1 + n // max(1, len(rows)))):
        s = split_sentences(t or "")
        if s:
            qs.append({"id": f"q{len(qs)}", "question": s[0][:200]})
        if len(qs) == n:
            break
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(q) + "\n" for q in qs)
    return path


def _run_child(args: list[str], result: str) -> tuple[dict, float]:
    from bench.scale_data import peak_rss_mb
    rc, peak, _ = peak_rss_mb([sys.executable, "-m", "bench.scale_bench", *args, "--result", result], cwd=ROOT)
    if rc != 0:
        raise RuntimeError(f"{' '.join(args)}: exit {rc}")
    with open(result, encoding="utf-8") as f:
        return json.load(f), peak


# --- the child steps (each in its own process) -----------------------------------------------

def _child_build(a) -> dict:
    from pipelines.segments import rebuild_segments
    shutil.rmtree(os.path.join(a.index, "segments"), ignore_errors=True)
    got = rebuild_segments(_cfg(a.segment), a.index)
    return {"segments": len(got["segments"]), "artifact_s": got["artifact_s"], "build_s": got["build_s"]}


def _child_answer(a) -> dict:
    from pipelines.answer import run_answer
    out = os.path.join(WORK, f"answers-{os.path.basename(a.index)}.jsonl")
    for p in (out, out + ".summary.json"):
        if os.path.exists(p):
            os.remove(p)
    shutil.rmtree(out + ".parts", ignore_errors=True)
    t = time.perf_counter()
    s = run_answer(_cfg(a.segment), a.index, a.questions, out, progress=False, log=lambda *_: None, overwrite=True)
    wall = time.perf_counter() - t
    return {"questions": s["questions_written"], "answer_wall_s": round(wall, 2),
            "answer_qps": round(s["questions_written"] / wall, 2)}


def _child_nightly(a) -> dict:
    from pipelines.segments import segment_version
    from transforms.index import publish
    from transforms.ingest.embed import model_spec_from_config
    cfg = _cfg(a.segment)
    with open(os.path.join(publish.resolve_index(a.index), "manifest.json"), encoding="utf-8") as f:
        live = json.load(f)
    got = segment_version(a.index, a.version, a.version, cfg, model_spec_from_config(cfg), live,
                          log=lambda *_: None)
    return {"segments": len(got["segments"]), "nightly_artifact_s": got["artifact_s"],
            **{k: got["segment_plan"][k] for k in ("reused", "built", "merged", "tombstones")}}


def _nightly_version(idx: str, n: int) -> str:
    from bench.scale_data import write_changed_version
    from transforms.index import publish
    new = os.path.join(WORK, f"nightly-{n}")
    shutil.rmtree(new, ignore_errors=True)
    write_changed_version(publish.resolve_index(idx), new, 0.01)
    return new


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.scale_bench", description=__doc__.splitlines()[0])
    ap.add_argument("step", nargs="?", choices=["build", "answer", "nightly"], help=argparse.SUPPRESS)
    ap.add_argument("--sizes", default="100000,250000,300000,1000000,3000000")
    ap.add_argument("--segment", type=int, default=250_000)
    ap.add_argument("--questions", default="500")
    ap.add_argument("--nightly", default="300000,1000000", help="sizes that also get a 1%% nightly ('' for none)")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "scale.json"))
    ap.add_argument("--merge", action="store_true", help="keep --out's rows of the sizes not run now "
                    "(each row says when and at which commit it was measured)")
    ap.add_argument("--index", help=argparse.SUPPRESS)
    ap.add_argument("--version", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.step:  # a child process
        got = {"build": _child_build, "answer": _child_answer, "nightly": _child_nightly}[a.step](a)
        with open(a.result, "w", encoding="utf-8") as f:
            json.dump(got, f)
        return 0
    os.makedirs(WORK, exist_ok=True)
    qfile = _questions(os.path.join(WORK, "questions.jsonl"), int(a.questions))
    nightly = {int(x) for x in a.nightly.split(",") if x}
    sizes = [int(x) for x in a.sizes.split(",")]
    rows, kept = [], _kept_rows(a.out, sizes) if a.merge else []
    stamp = {"measured": time.strftime("%Y-%m-%d", time.gmtime()), "commit": _commit()}
    for n in sizes:
        short = _disk_short(n)
        if short:  # a size that does not fit is said, not silently dropped
            rows.append({"chunks": n, "skipped": short})
            print(json.dumps(rows[-1]), flush=True)
            continue
        idx = _make_index(n)
        res = os.path.join(WORK, "result.json")
        b, b_rss = _run_child(["build", "--index", idx, "--segment", str(a.segment)], res)
        q, q_rss = _run_child(["answer", "--index", idx, "--segment", str(a.segment), "--questions", qfile], res)
        row = {"chunks": n, "segments": b["segments"], "segment_max_chunks": a.segment,
               "answer_peak_rss_mb": round(q_rss), "build_peak_rss_mb": round(b_rss),
               "artifact_s": b["artifact_s"], "answer_qps": q["answer_qps"], "questions": q["questions"], **stamp}
        rows.append(row)
        print(json.dumps(row), flush=True)
        if n in nightly:
            new = _nightly_version(idx, n)
            g, g_rss = _run_child(["nightly", "--index", idx, "--version", new, "--segment", str(a.segment)], res)
            row = {"chunks": n, "segments": g["segments"], "segment_max_chunks": a.segment, "nightly": True,
                   "change_fraction": 0.01, "nightly_artifact_s": g["nightly_artifact_s"],
                   "build_peak_rss_mb": round(g_rss), "full_artifact_s": b["artifact_s"],
                   "nightly_vs_full": round(g["nightly_artifact_s"] / b["artifact_s"], 4),
                   **{k: g[k] for k in ("reused", "built", "merged", "tombstones")}, **stamp}
            rows.append(row)
            print(json.dumps(row), flush=True)
        _write(a.out, sorted(kept + rows, key=lambda r: (r["chunks"], bool(r.get("nightly")))))
    return 0


def _kept_rows(out: str, sizes: list[int]) -> list[dict]:
    try:
        with open(out, encoding="utf-8") as f:
            return [r for r in json.load(f) if r["chunks"] not in sizes]
    except (OSError, ValueError):
        return []


def _commit() -> str:
    import subprocess
    got = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return got.stdout.strip() or "unknown"


def _write(out: str, rows: list[dict]) -> None:
    os.makedirs(os.path.dirname(out), exist_ok=True)
    write_json(out, rows, depth=1)
    cols = ["chunks", "segments", "build_peak_rss_mb", "artifact_s", "answer_peak_rss_mb", "answer_qps",
            "nightly_artifact_s", "nightly_vs_full"] + (["skipped"] if any("skipped" in r for r in rows) else [])
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(str(r.get(c, "")) for c in cols) + " |" for r in rows]
    runs: dict[str, list[str]] = {}
    for r in rows:
        if "commit" in r:
            runs.setdefault(f"{r['measured']} at {r['commit']}", []).append(f"{r['chunks']:,}" + (" nightly" if r.get("nightly") else ""))
    notes = [f"Measured {k}: {', '.join(v)}." for k, v in runs.items()]
    with open(os.path.splitext(out)[0] + ".md", "w", encoding="utf-8") as f:
        f.write("Segmented index at scale (`make bench-scale`, python -m bench.scale_bench)\n\n"
                + "\n".join(lines) + "\n" + ("\n" + "\n".join(notes) + "\n" if len(runs) > 1 else ""))


if __name__ == "__main__":
    sys.exit(main())


SECTION = "8. Segments at scale (short)"


def bench_scale_short(report, sizes=(20_000, 80_000), segment: int = 20_000, questions: int = 100) -> list[dict]:
    """`make bench` section 8: the scale bench at small sizes (one segment, then four), each figure
    beside its one-segment baseline measured in the same run."""
    from bench.table import Figure
    out = os.path.join(WORK, "scale-short.json")
    main(["--sizes", ",".join(map(str, sizes)), "--segment", str(segment), "--questions", str(questions),
          "--nightly", str(sizes[-1]), "--out", out])
    with open(out, encoding="utf-8") as f:
        rows = json.load(f)
    full = [r for r in rows if not r.get("nightly")]
    one, many = full[0], full[-1]
    label = f"{one['chunks']:,} chunks in 1 segment"
    at = f"{many['chunks']:,} chunks in {many['segments']} segments"
    report.add(Figure(SECTION, f"answer job peak RSS, {at}", many["answer_peak_rss_mb"], "MB",
                      one["answer_peak_rss_mb"], label))
    report.add(Figure(SECTION, f"segment build peak RSS, {at}", many["build_peak_rss_mb"], "MB",
                      one["build_peak_rss_mb"], label))
    report.add(Figure(SECTION, f"answer q/s, {at}", many["answer_qps"], "q/s", one["answer_qps"], label))
    for r in rows:
        if r.get("nightly"):
            report.add(Figure(SECTION, f"nightly artifact time, 1% of {r['chunks']:,} changed", r["nightly_artifact_s"],
                              "s", r["full_artifact_s"], "full segment build of the same version"))
    return rows
