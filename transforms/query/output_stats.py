"""Answer-job output checks: a finished output never overwritten by another job, and counts of
the whole output (whole-file problems of the question file: transforms/query/questions/file.py)."""
from __future__ import annotations

import json
import math
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


# The answer job's summary counts the answered records per band of their calibrated confidence
# (among answers at confidence c, about c are right: docs/evaluation.md): [0, 0.25), [0.25, 0.5),
# [0.5, 0.75), [0.75, 1].
CONFIDENCE_BAND_EDGES = (0.25, 0.5, 0.75)
CONFIDENCE_BANDS = ("<0.25", "0.25-0.5", "0.5-0.75", ">=0.75")


def confidence_band(c: float) -> str:
    """The summary band of a confidence: the first band whose upper edge is above it."""
    for edge, name in zip(CONFIDENCE_BAND_EDGES, CONFIDENCE_BANDS):
        if c < edge:
            return name
    return CONFIDENCE_BANDS[-1]


def format_confidence_bands(bands: dict) -> str:
    """The summary's band counts as one line: "answered by confidence: <0.25 3, 0.25-0.5 10, ..."."""
    line = "answered by confidence: " + ", ".join(f"{b} {bands.get(b, 0)}" for b in CONFIDENCE_BANDS)
    return line + (f"; {bands['none']} without one" if bands.get("none") else "")


class StatusCounts:
    """Status counts of answer records, fed one shard at a time: memory follows a shard, not
    the whole output (a 200,000-answer output used to be read whole just to be counted).

    When any record carries a `confidence`, `counts["confidence_bands"]` counts the answered
    records per CONFIDENCE_BANDS band ("none": answered records without one); without any, the
    key is absent (an answerer that gives no confidence, an output from before the field)."""

    def __init__(self):
        self.counts = {"answered": 0, "not_found": 0, "unsupported": 0, "error": 0, "invalid_citations": 0}
        self._bands = dict.fromkeys(CONFIDENCE_BANDS + ("none",), 0)

    def add(self, status: Optional[str], invalid, confidence: Optional[float] = None) -> None:
        self.counts[status if status in self.counts else "error"] += 1
        self.counts["invalid_citations"] += int(invalid or 0)
        ok = isinstance(confidence, (int, float)) and not isinstance(confidence, bool) and math.isfinite(confidence)
        if ok:
            self.counts["confidence_bands"] = self._bands
        if status == "answered":
            self._bands[confidence_band(float(confidence)) if ok else "none"] += 1

    def add_jsonl(self, data: bytes) -> int:
        """Count the records of JSONL bytes; returns how many. JSON's line end only: U+2028
        and friends are written raw inside a record."""
        n = 0
        for line in data.split(b"\n"):
            if line.strip():
                rec = json.loads(line)
                self.add(rec.get("status"), rec.get("invalid_citations"), rec.get("confidence"))
                n += 1
        return n

    def add_table(self, t) -> None:
        if not t.num_rows:
            return
        names = t.schema.names
        invalid = t.column("invalid_citations").to_pylist() if "invalid_citations" in names else [0] * t.num_rows
        conf = t.column("confidence").to_pylist() if "confidence" in names else [None] * t.num_rows
        for st, inv, c in zip(t.column("status").to_pylist(), invalid, conf):
            self.add(st, inv, c)


def count_output(output: str, fmt: str) -> dict:
    """Status counts over a whole joined output, read in pieces (lines in 1 MiB blocks,
    Parquet by row group): memory stays flat however long the output is."""
    from transforms.common import storage
    counts = StatusCounts()
    if fmt == "parquet":
        import pyarrow.parquet as pq
        with storage.open_local_or_download(output) as path:
            f = pq.ParquetFile(path)
            cols = [c for c in ("status", "invalid_citations", "confidence") if c in f.schema_arrow.names]
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
