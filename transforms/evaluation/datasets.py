"""Evaluation datasets in BEIR layout, and the mapping of judged documents to index doc ids."""
from __future__ import annotations

import json
import os
import random
import re
from dataclasses import dataclass, field
from typing import Optional

from transforms.evaluation import metrics as M

# bm25s (k1=0.9, b=0.4) nDCG@10 from /work/shared/data/README.md: a floor to beat.
BM25_FLOORS = {
    "cranfield": {"all": 0.341},
    "vaswani-npl": {"all": 0.445},
    "msmarco-trecdl19-subset": {"all": 0.620},
    "squad-dev-half": {"all": 0.869},  # measured on the full SQuAD dev set, 2x this corpus
    "debian-docs": {"man": 0.692, "py": 0.834, "git": 0.826},
}



@dataclass
class Dataset:
    name: str
    queries: dict[str, str]  # only queries with at least one relevant document
    qrels: dict[str, dict[str, int]]
    answers: dict[str, list[str]] = field(default_factory=dict)
    corpus: Optional[str] = None  # corpus.jsonl or docs/, what gets indexed


def read_qrels(path: str) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f):
            parts = line.rstrip("\n").split("\t")
            if len(parts) < 3 or (n == 0 and parts[0] == "query-id"):
                continue
            out.setdefault(parts[0], {})[parts[1]] = int(float(parts[2]))
    return out


def read_queries(path: str) -> dict[str, str]:
    from transforms.query.records import Question
    from transforms.query.questions.read import read_questions
    return {q.id: q.question for q in read_questions(path) if isinstance(q, Question)}


def read_answers(path: str) -> dict[str, list[str]]:
    out = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                rec = json.loads(line)
                out[str(rec["id"])] = [a for a in rec.get("answers", []) if a]
    return out


def load_dataset(path: Optional[str] = None, questions: Optional[str] = None,
                 qrels: Optional[str] = None) -> Dataset:
    """A BEIR dir (queries.jsonl, qrels/test.tsv, corpus.jsonl or docs/, answers.jsonl);
    questions/qrels files override the dir's."""
    if path is None and not (questions and qrels):
        raise ValueError("give a dataset dir, or both a questions file and a qrels file")
    qfile = questions or os.path.join(path, "queries.jsonl")
    rfile = qrels or os.path.join(path, "qrels", "test.tsv")
    rels = read_qrels(rfile)
    queries = {q: t for q, t in read_queries(qfile).items() if M.relevant(rels.get(q, {}))}
    corpus = answers = None
    if path:
        for cand in ("corpus.jsonl", "docs"):
            if os.path.exists(os.path.join(path, cand)):
                corpus = os.path.join(path, cand)
                break
        afile = os.path.join(path, "answers.jsonl")
        answers = read_answers(afile) if os.path.exists(afile) and not questions else None
    name = os.path.basename(os.path.normpath(path)) if path else os.path.basename(qfile)
    return Dataset(name, queries, {q: rels[q] for q in queries}, answers or {}, corpus)


def _natural(s: str):
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", s)]


def sample_ids(ids, n: Optional[int], seed: int = 0) -> list[str]:
    """Deterministic: all ids (naturally sorted), or a seeded sample of n of them."""
    ids = sorted(ids, key=_natural)
    if n is None or n >= len(ids):
        return ids
    return sorted(random.Random(seed).sample(ids, n), key=_natural)


def query_group(qid: str) -> Optional[str]:
    m = re.match(r"([A-Za-z]+)-", qid)
    return m.group(1) if m else None


# --- documents: index doc ids <-> the dataset's corpus ids ------------------------------

class DocLabels:
    """Qrels name documents by record id (corpus.jsonl: a JSONL record's own `id`, which its
    doc_id "<id>@<12 hex of the file's key>" starts with: parse.jsonl.record_id_of) or by path under
    the input (a folder corpus, where a doc's `key` is that path). Content-identical copies
    are one document in the index; every copy's path names it, and so does every
    near-duplicate member's path or record id (its representative's document)."""

    def __init__(self, version_dir: str, qrel_ids: set[str]):
        from transforms.index.shards import read_table
        from transforms.records import record_id_of
        t = read_table(version_dir, "documents", ["doc_id", "key", "source_uri", "source_uris"]).to_pylist()
        by_key: dict[str, str] = {}
        for r in t:
            root = r["source_uri"][:-len(r["key"])] if r["source_uri"].endswith(r["key"]) else None
            by_key[r["key"]] = r["doc_id"]
            for u in r["source_uris"] or []:
                if root and u.startswith(root):
                    by_key.setdefault(u[len(root):], r["doc_id"])
        doc_ids = {r["doc_id"]: record_id_of(r["doc_id"]) or r["doc_id"] for r in t}  # doc_id -> its label
        # near-duplicate members (index job, dedupe.near_duplicates) are served by their
        # representative: a member's paths are among its source_uris, its id maps here
        members: dict[str, str] = {}
        try:
            for r in read_table(version_dir, "near_duplicates", ["member", "representative"]).to_pylist():
                if r["representative"] in doc_ids:
                    members[record_id_of(r["member"]) or r["member"]] = r["representative"]
        except FileNotFoundError:
            pass
        labels = set(doc_ids.values()) | set(members)
        self.by_key = len(qrel_ids & set(by_key)) > len(qrel_ids & labels)
        self.doc_of = by_key if self.by_key else {**members, **{label: d for d, label in doc_ids.items()}}
        self.labels: dict[str, list[str]] = {}
        for label, d in self.doc_of.items():
            self.labels.setdefault(d, []).append(label)

    def doc_qrels(self, qrels: dict[str, int]) -> dict:
        """Qrels in doc_id space. A judged document missing from the index stays in
        as a placeholder, so it still counts in the ideal ranking and in recall."""
        out: dict = {}
        for label, g in qrels.items():
            d = self.doc_of.get(label, ("missing", label))
            out[d] = max(out.get(d, g), g)
        return out

