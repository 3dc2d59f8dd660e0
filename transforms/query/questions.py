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
from transforms.query.validate import QuestionFieldError, parse_acl, parse_filters

# One CSV field may be this long; a longer one makes that row an error record, not the file.
MAX_FIELD_CHARS = 128 * 1024
_CSV_HARD_LIMIT = 64 * 1024 * 1024  # csv's own limit, far above MAX_FIELD_CHARS



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
        return InputError(f"line {line}: missing or empty question", line, str(qid), None)
    try:
        acl = parse_acl(rec.get("acl"))
        filters = parse_filters(rec.get("filters"))
    except QuestionFieldError as e:
        return InputError(f"line {line}: {e}", line, str(qid), text if isinstance(text, str) else None)
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
            yield from read_csv_questions(text)
            return
        yield from read_jsonl_rows(text, first_line=1)


def read_jsonl_rows(rows, first_line: int = 1) -> Iterator[QuestionOrError]:
    """JSONL rows (numbered from first_line) -> one Question or InputError per non-blank row."""
    for line, row in enumerate(rows, start=first_line):
        if not row.strip():
            continue
        try:
            rec = json.loads(row)
            if not isinstance(rec, dict):
                raise ValueError("not a JSON object")
        except ValueError as e:
            yield InputError(f"line {line}: unreadable JSON ({e})", line, None, None)
            continue
        yield _safe(rec, line)


def _safe(rec: dict, line: int) -> QuestionOrError:
    try:
        return question_from_record(rec, line)
    except Exception as e:  # e.g. a filters column that is not JSON
        return InputError(f"line {line}: {type(e).__name__}: {e}", line, _id_of(rec), None)


def _id_of(rec) -> Optional[str]:
    """The record's id when it has a usable one: an error record keeps it."""
    try:
        qid = rec.get("id", rec.get("_id")) if isinstance(rec, dict) else None
    except Exception:
        return None
    if qid is None or isinstance(qid, (dict, list)) or str(qid).strip() == "":
        return None
    return str(qid)


def read_csv_questions(text) -> Iterator[QuestionOrError]:
    """CSV rows -> Questions or error records, numbered by the physical line they start on.

    One bad row is one error record: a field over MAX_FIELD_CHARS, a row with more fields
    than the header, a row csv cannot read. A quoted field that runs over several lines and
    swallows lines shaped like rows (an unclosed quote) is reported: the row is an error, and
    every swallowed line is an error record of its own (with its id), so rows in = records out.
    """
    consumed: list[str] = []

    def lines():
        for physical in text:
            consumed.append(physical)
            yield physical

    old_limit = csv.field_size_limit()
    csv.field_size_limit(_CSV_HARD_LIMIT)
    try:
        reader = csv.reader(lines())
        try:
            header = next(reader)
        except StopIteration:
            return
        except csv.Error as e:
            yield InputError(f"line 1: unreadable CSV header ({e})", 1, None, None)
            return
        header = [h.strip().lstrip("\ufeff") for h in header]
        start = reader.line_num + 1
        while True:
            consumed.clear()
            try:
                row = next(reader)
            except StopIteration:
                break
            except csv.Error as e:
                yield InputError(f"line {start}: unreadable CSV row ({e})", start, None, None)
                start = reader.line_num + 1
                continue
            end = reader.line_num
            line, start = start, end + 1
            if not row or not any(f.strip() for f in row):
                continue
            rec = dict(zip(header, row))
            if len(row) > len(header):
                yield InputError(f"line {line}: {len(row)} fields but the header "
                                      f"has {len(header)}", line, _id_of(rec), None)
                continue
            long = [h for h, f in zip(header, row) if len(f) > MAX_FIELD_CHARS]
            if long:
                yield InputError(f"line {line}: field {long[0]!r} is longer than {MAX_FIELD_CHARS} "
                                      "characters", line, _id_of(rec) if "id" not in long else None, None)
                continue
            swallowed = _swallowed_rows(consumed[1:], len(header)) if end > line else []
            if swallowed:
                yield InputError(f"line {line}: a quoted field runs over lines {line}-{end} and holds "
                                      f"{len(swallowed)} line(s) shaped like rows (unclosed quote?)", line, _id_of(rec), None)
                for offset, fields in swallowed:
                    n = line + offset
                    yield InputError(f"line {n}: swallowed by an unclosed quote on line {line}", n, _id_of(dict(zip(header, fields))), None)
                continue
            yield _safe(rec, line)
    finally:
        csv.field_size_limit(old_limit)


def _swallowed_rows(continuation: list[str], n_fields: int) -> list[tuple[int, list[str]]]:
    """Continuation lines of a multi-line field that parse as a whole row of the file."""
    out = []
    for offset, physical in enumerate(continuation, start=1):
        try:
            fields = next(csv.reader([physical.rstrip("\r\n")]))
        except (csv.Error, StopIteration):
            continue
        if len(fields) == n_fields and n_fields > 1 and fields[0].strip():
            out.append((offset, fields))
    return out
