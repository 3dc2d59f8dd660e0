"""Answer-job output checks: a finished output never overwritten by another job, and counts of
the whole output (whole-file problems of the question file: transforms/query/question_file.py)."""
from __future__ import annotations

import json
import os
from typing import Optional


class OutputExistsError(RuntimeError):
    """--output holds the finished output of a different job."""


def refuse_foreign_output(output: str, parts_dir: str, fingerprint: dict, overwrite: bool) -> None:
    """A finished output is replaced only by a rerun of the same job, or with overwrite."""
    from transforms.common import storage
    if overwrite or not storage.exists(output):
        return
    try:
        same = json.loads(storage.read_text(storage.join(parts_dir, "_run.json"))) == fingerprint
    except (OSError, ValueError):
        same = False
    if not same:
        raise OutputExistsError(f"{output} already holds the answers of a different job "
                                "(other question file, index version or settings); "
                                "choose another --output or pass --overwrite")


class StatusCounts:
    """Status counts of answer records, fed one shard at a time: memory follows a shard, not
    the whole output (a 200,000-answer output used to be read whole just to be counted)."""

    def __init__(self):
        self.counts = {"answered": 0, "not_found": 0, "unsupported": 0, "error": 0, "invalid_citations": 0}

    def add(self, status: Optional[str], invalid) -> None:
        self.counts[status if status in self.counts else "error"] += 1
        self.counts["invalid_citations"] += int(invalid or 0)

    def add_jsonl(self, data: bytes) -> int:
        """Count the records of JSONL bytes; returns how many. JSON's line end only: U+2028
        and friends are written raw inside a record."""
        n = 0
        for line in data.split(b"\n"):
            if line.strip():
                rec = json.loads(line)
                self.add(rec.get("status"), rec.get("invalid_citations"))
                n += 1
        return n

    def add_table(self, t) -> None:
        if not t.num_rows:
            return
        invalid = t.column("invalid_citations").to_pylist() if "invalid_citations" in t.schema.names \
            else [0] * t.num_rows
        for st, inv in zip(t.column("status").to_pylist(), invalid):
            self.add(st, inv)


def count_output(output: str, fmt: str) -> dict:
    """Status counts over a whole joined output, read in pieces (lines in 1 MiB blocks,
    Parquet by row group): memory stays flat however long the output is."""
    from transforms.common import storage
    counts = StatusCounts()
    if fmt == "parquet":
        import pyarrow.parquet as pq
        with storage.open_local_or_download(output) as path:
            f = pq.ParquetFile(path)
            cols = [c for c in ("status", "invalid_citations") if c in f.schema_arrow.names]
            for batch in f.iter_batches(columns=cols):
                counts.add_table(batch)
        return counts.counts
    with storage.open_local_or_download(output) as path, open(path, "rb") as f:
        rest = b""
        for block in iter(lambda: f.read(1 << 20), b""):
            lines = (rest + block).split(b"\n")
            rest = lines.pop()
            counts.add_jsonl(b"\n".join(lines))
        counts.add_jsonl(rest)
    return counts.counts
