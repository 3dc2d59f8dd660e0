"""Two chunker versions on every document of a corpus: do they give the same chunks up to
whitespace, and the same model tokens?

    python -m bench.studies.chunker_compare --before <git rev> --corpus ../shared/data/debian-docs/docs \
        [--out bench/results/chunker_compare.jsonl]

Parses each file of the corpus once (as the index job does) and chunks every document with
`transforms/ingest/chunk.py` as it is at <rev> and as it is now, on the default config's
chunk settings and tokenizer. Counts the chunks whose text differs, and of those the ones whose
words (text split at whitespace) or token ids differ: 0 means retrieval cannot tell the two
apart (chunker version 2 keeps a long paragraph's line breaks: docs/answer-selection-change.md).
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time

from bench.data import ROOT


def chunker_at(rev: str):
    """transforms/ingest/chunk.py as it is at git revision `rev`, as a module."""
    src = subprocess.run(["git", "show", f"{rev}:transforms/ingest/chunk.py"], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout
    path = os.path.join(tempfile.mkdtemp(), "chunk_before.py")
    with open(path, "w") as f:
        f.write(src)
    spec = importlib.util.spec_from_file_location("chunk_before", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def compare(corpus: str, before) -> dict:
    from configs.schema import load_config
    from pipelines.index import chunk_settings
    from transforms.ingest import chunk as now
    from transforms.ingest.embed import model_spec_from_config
    from transforms.ingest.parse import parse_object
    from transforms.model.tokens import load_tokenizer
    from transforms.records import RawObject

    cfg = load_config(str(ROOT / "configs" / "default.yaml"))
    spec = model_spec_from_config(cfg)
    tok = load_tokenizer(spec.tokenizer_path)
    st = chunk_settings(cfg, spec)
    st_before = before.ChunkSettings(model_max_tokens=st.model_max_tokens, chunk_tokens=st.chunk_tokens,
                                     overlap_tokens=st.overlap_tokens, context_tokens=st.context_tokens)
    n = {"files": 0, "unparsed_files": 0, "documents": 0, "chunks": 0, "chunk_count_differs": 0,
         "chunks_whose_text_differs": 0, "chunks_with_other_words_or_tokens": 0}
    t0 = time.perf_counter()
    walk = [(os.path.dirname(corpus), [], [os.path.basename(corpus)])] if os.path.isfile(corpus) else os.walk(corpus)
    for dirpath, _, files in walk:
        for name in sorted(files):
            path = os.path.join(dirpath, name)
            with open(path, "rb") as f:
                raw = RawObject.from_bytes("file://" + path, os.path.relpath(path, dirpath if os.path.isfile(corpus) else corpus), f.read())
            try:
                docs = parse_object(raw)
            except Exception:  # the index job dead-letters these; nothing to chunk
                n["unparsed_files"] += 1
                continue
            n["files"] += 1
            for d in docs:
                n["documents"] += 1
                a, b = before.chunk_document(d, tok, st_before), now.chunk_document(d, tok, st)
                n["chunks"] += len(b)
                if len(a) != len(b):
                    n["chunk_count_differs"] += 1
                    continue
                for x, y in zip(a, b):
                    if x.text != y.text:
                        n["chunks_whose_text_differs"] += 1
                        if x.text.split() != y.text.split() or tok.encode(x.text).ids != tok.encode(y.text).ids:
                            n["chunks_with_other_words_or_tokens"] += 1
    n["seconds"] = round(time.perf_counter() - t0, 1)
    return n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", required=True, help="git revision of the chunker to compare with")
    ap.add_argument("--corpus", required=True, help="a folder of raw documents, or one file (a BEIR corpus.jsonl)")
    ap.add_argument("--out", help="append the result as a JSON line to this file")
    args = ap.parse_args()
    result = {"before": args.before, "corpus": os.path.relpath(os.path.abspath(args.corpus), ROOT),
              **compare(args.corpus, chunker_at(args.before))}
    line = json.dumps(result)
    print(line)
    if args.out:
        with open(args.out, "a") as f:
            f.write(line + "\n")
    sys.exit(0)


if __name__ == "__main__":
    main()
