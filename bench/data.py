"""Bench inputs: a real corpus from ../shared/data when present, else a generated one.

Both give the same shape: docs as {"_id", "title", "text"} and questions as
{"id", "question"}, deterministic for a given size so runs compare.
"""
from __future__ import annotations

import functools
import json
import os
import random
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARED_DATA = ROOT.parent / "shared" / "data"
SAMPLES = ROOT / "samples"
REAL_SET = "cranfield"  # 1,400 short abstracts (~213 tokens), 225 real questions


@dataclass
class Dataset:
    name: str
    docs: list[dict]
    questions: list[dict]

    def take(self, n_docs: int) -> list[dict]:
        """The first n_docs; cycles with renamed copies when n_docs exceeds the corpus."""
        out = []
        for i in range(n_docs):
            d = self.docs[i % len(self.docs)]
            if i >= len(self.docs):  # a distinct id and bytes, so dedupe does not drop it
                d = {**d, "_id": f"{d['_id']}~{i // len(self.docs)}"}
            out.append(d)
        return out


def load_dataset(data_dir: str | os.PathLike | None = None, generated_docs: int = 1200) -> Dataset:
    base = Path(data_dir) if data_dir else SHARED_DATA
    if (base / REAL_SET / "corpus.jsonl").exists():
        return load_beir(base / REAL_SET, REAL_SET)
    return generated_dataset(generated_docs)


def load_beir(folder: Path, name: str) -> Dataset:
    docs = []
    with open(folder / "corpus.jsonl", encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            if r.get("text", "").strip():
                docs.append({"_id": str(r["_id"]), "title": r.get("title") or "", "text": r["text"]})
    with open(folder / "queries.jsonl", encoding="utf-8") as f:
        questions = [{"id": str(r["_id"]), "question": r["text"].strip()}
                     for r in map(json.loads, f) if r.get("text", "").strip()]
    return Dataset(name, docs, questions)


# --- generated fallback --------------------------------------------------------------
_WORD = re.compile(r"[A-Za-z][A-Za-z'-]+")


@functools.lru_cache(maxsize=1)
def sample_sentences() -> tuple[str, ...]:
    """Prose sentences from samples/corpus, parsed by the project's own parsers."""
    from transforms.ingest.parse import parse_object
    from transforms.records import RawObject
    from transforms.common.sentences import split_sentences

    out: list[str] = []
    for path in sorted(p for p in (SAMPLES / "corpus").rglob("*") if p.is_file()):
        key = path.relative_to(SAMPLES / "corpus").as_posix()
        try:
            docs = parse_object(RawObject.from_bytes(str(path), key, path.read_bytes()))
        except Exception:  # the samples include a deliberately broken PDF
            continue
        for d in docs:
            for s in split_sentences(d.text):
                s = " ".join(s.split())
                words = _WORD.findall(s)
                # prose only: 6-45 words, mostly letters (no tables, code, option lists)
                if 6 <= len(words) <= 45 and sum(map(len, words)) >= 0.7 * len(s.replace(" ", "")):
                    out.append(s)
    return tuple(dict.fromkeys(out))


def generated_dataset(n_docs: int, seed: int = 7) -> Dataset:
    """Docs are runs of consecutive sample sentences (coherent, real English);
    questions are built from one sentence of a doc, so each has an answer."""
    sents = sample_sentences()
    if len(sents) < 20:
        raise RuntimeError("samples/corpus gave too few sentences to generate a corpus")
    rng = random.Random(seed)
    docs, questions = [], []
    for i in range(n_docs):
        k = rng.randint(5, 12)
        start = rng.randrange(0, len(sents) - k)
        body = sents[start:start + k]
        title = " ".join(_WORD.findall(body[0])[:6]).capitalize()
        docs.append({"_id": f"gen{i:05d}", "title": title, "text": " ".join(body)})
        if i % 4 == 0:
            words = _WORD.findall(body[rng.randrange(k)])
            questions.append({"id": f"q{i:05d}",
                              "question": "What does the documentation say about "
                                          + " ".join(words[:min(9, len(words))]).lower() + "?"})
    return Dataset("generated", docs, questions)


# --- writers ---------------------------------------------------------------------------
def write_corpus(docs: list[dict], folder: str | os.PathLike) -> str:
    """One JSONL file in its own folder (the folder is the index input)."""
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "corpus.jsonl")
    with open(path, "w", encoding="utf-8") as f:
        for d in docs:
            f.write(json.dumps(d, ensure_ascii=False) + "\n")
    return str(folder)


def write_questions(questions: list[dict], path: str | os.PathLike) -> str:
    with open(path, "w", encoding="utf-8") as f:
        for q in questions:
            f.write(json.dumps({"id": q["id"], "question": q["question"]}, ensure_ascii=False) + "\n")
    return str(path)
