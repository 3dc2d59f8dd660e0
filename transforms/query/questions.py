"""Reading question files: JSONL, CSV or Parquet, local or s3://.

Every line yields a Question or, when it cannot be read, an error record that
goes to the output with the reason, so no input line is lost.
"""
from __future__ import annotations

import csv
import io
import json
from typing import Iterator, Optional

from transforms.common import storage
from transforms.common.s3 import is_s3
from transforms.query.records import InputError, Question, QuestionOrError


def detect_format(uri: str) -> str:
    lower = uri.lower()
    for ext, fmt in ((".jsonl", "jsonl"), (".ndjson", "jsonl"), (".json", "jsonl"), (".csv", "csv"),
                     (".parquet", "parquet"), (".pq", "parquet")):
        if lower.endswith(ext):
            return fmt
    raise ValueError(f"{uri}: cannot tell the question file format from its name "
                     f"(expected one of .jsonl, .csv, .parquet)")


def _open_binary(uri: str, s3=None):
    if is_s3(uri):
        return io.BytesIO(storage.read_bytes(uri, s3))
    if "://" in uri:
        from apache_beam.io.filesystems import FileSystems
        return FileSystems.open(uri)
    return open(uri, "rb")


def question_from_record(rec: dict, line: int) -> QuestionOrError:
    qid = rec.get("id", rec.get("_id"))
    text = rec.get("question", rec.get("text"))
    if qid is None or str(qid).strip() == "":
        return InputError(f"line {line}: missing id", line, None, text if isinstance(text, str) else None)
    if not isinstance(text, str) or not text.strip():
        return InputError(f"line {line}: missing or empty question", line, str(qid))
    acl = rec.get("acl")
    if isinstance(acl, str):  # CSV: groups separated by ';' or ','
        acl = [g.strip() for g in acl.replace(";", ",").split(",") if g.strip()]
    filters = rec.get("filters")
    if isinstance(filters, str) and filters.strip():
        filters = json.loads(filters)
    meta = {k: v for k, v in rec.items() if k not in ("id", "_id", "question", "text", "acl", "filters")}
    return Question(id=str(qid), question=text.strip(), acl=list(acl) if acl else None,
                    filters=filters or None, metadata=meta or None, line=line)


def read_questions(uri: str, fmt: Optional[str] = None, s3=None) -> Iterator[QuestionOrError]:
    fmt = fmt or detect_format(uri)
    if fmt == "parquet":
        import pyarrow.parquet as pq
        with _open_binary(uri, s3) as f:
            pf = pq.ParquetFile(f)
            line = 0
            for batch in pf.iter_batches(batch_size=10000):
                for rec in batch.to_pylist():
                    line += 1
                    yield _safe(rec, line)
        return
    with _open_binary(uri, s3) as raw:
        text = io.TextIOWrapper(raw, encoding="utf-8", errors="replace", newline="")
        if fmt == "csv":
            for line, rec in enumerate(csv.DictReader(text), start=1):
                yield _safe(rec, line)
            return
        for line, row in enumerate(text, start=1):
            if not row.strip():
                continue
            try:
                rec = json.loads(row)
                if not isinstance(rec, dict):
                    raise ValueError("not a JSON object")
            except ValueError as e:
                yield InputError(f"line {line}: unreadable JSON ({e})", line)
                continue
            yield _safe(rec, line)


def _safe(rec: dict, line: int) -> QuestionOrError:
    try:
        return question_from_record(rec, line)
    except Exception as e:  # e.g. a filters column that is not JSON
        return InputError(f"line {line}: {type(e).__name__}: {e}", line)
