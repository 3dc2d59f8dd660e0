"""Reading question files: JSONL, CSV or Parquet, local or s3://.

Every line yields a Question or, when it cannot be read, an error record that
goes to the output with the reason, so no input line is lost. A JSONL line ends at "\\n" only
(JSON's own definition, transforms/query/questions/jsonl_lines.py); a line or row over `max_line_bytes`
(config `questions.max_line_bytes`) is an error record, read with bounded memory.
"""
from __future__ import annotations

import io
import json
from typing import Iterator, Optional

from transforms.common import storage
from transforms.common.decode import decode_lenient
from transforms.common.s3 import is_s3
from transforms.query.questions.jsonl_lines import DEFAULT_MAX_LINE_BYTES, Window, is_blank, iter_raw_lines, leading_id
from transforms.query.questions.csv_rows import MAX_FIELD_CHARS, read_csv_questions  # noqa: F401 (re-exported)
from transforms.query.records import InputError, Question, QuestionOrError
from transforms.query.questions.validate import (QuestionFieldError, check_shape, has_surrogate, parse_acl, parse_filters,
                                       parse_id, without_surrogates)


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


def open_range(uri: str, start: int, end: int, s3=None):
    """A buffered stream over bytes [start, end), read in order (on S3: one ranged GET, streamed)."""
    if end <= start:
        return io.BytesIO(b"")
    if is_s3(uri):
        from transforms.common.s3 import split_s3_uri
        bucket, key = split_s3_uri(uri)
        body = storage.s3_client(s3).get_object(Bucket=bucket, Key=key,
                                                Range=f"bytes={start}-{end - 1}")["Body"]
    else:
        body = open(uri, "rb", buffering=0)
        body.seek(start)
    return io.BufferedReader(Window(body, end - start), buffer_size=1024 * 1024)


def _open_lines(uri: str, s3=None):
    """A text question file as a stream with readline(limit), never read whole."""
    if "://" not in uri:
        return open(uri, "rb")
    if is_s3(uri):
        st = storage.stat(uri, s3)
        if st is None:
            raise FileNotFoundError(uri)
        return open_range(uri, 0, st["size"], s3)
    return io.BufferedReader(Window(_open_binary(uri, s3), 1 << 62))


def question_from_record(rec: dict, line: int) -> QuestionOrError:
    text = rec.get("question", rec.get("text"))
    shown = without_surrogates(text)
    try:
        check_shape(rec)  # before anything is written: deep nesting or lone surrogates fail the writer
        qid = parse_id(rec.get("id", rec.get("_id")))
    except QuestionFieldError as e:
        return InputError(f"line {line}: {e}", line, _id_of(rec), shown)
    if qid is None or qid.strip() == "":
        return InputError(f"line {line}: missing id", line, None, shown)
    if not isinstance(text, str) or not text.strip():
        return InputError(f"line {line}: missing or empty question", line, qid, None)
    try:
        acl = parse_acl(rec.get("acl"))
        filters = parse_filters(rec.get("filters"))
    except QuestionFieldError as e:
        return InputError(f"line {line}: {e}", line, qid, shown)
    meta = {k: v for k, v in rec.items() if k not in ("id", "_id", "question", "text", "acl", "filters")}
    return Question(id=qid, question=text.strip(), acl=list(acl) if acl else None,
                    filters=filters or None, metadata=meta or None, line=line)


def read_questions(uri: str, fmt: Optional[str] = None, s3=None,
                   max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> Iterator[QuestionOrError]:
    fmt = fmt or detect_format(uri)
    if fmt == "parquet":
        import pyarrow.parquet as pq

        from transforms.query.questions.parquet_rows import parquet_rows
        with _open_binary(uri, s3) as f:
            yield from parquet_rows(pq.ParquetFile(f).iter_batches(batch_size=10000), 1, max_line_bytes,
                                    _safe, _id_of)
        return
    with _open_lines(uri, s3) as raw:
        if fmt == "csv":
            yield from read_csv_questions(raw, _safe, _id_of, max_line_bytes)
            return
        yield from read_jsonl(raw, 1, max_line_bytes)


def read_jsonl(f, first_line: int = 1, max_bytes: int = DEFAULT_MAX_LINE_BYTES) -> Iterator[QuestionOrError]:
    """JSONL lines of the binary stream f (numbered from first_line) -> one Question or
    InputError per non-blank line."""
    for line, raw in enumerate(iter_raw_lines(f, max_bytes), start=first_line):
        if raw.too_long:
            yield InputError(f"line {line}: the line is {raw.size} bytes, over the cap of {max_bytes} "
                             "(questions.max_line_bytes)", line, leading_id(raw.data), None)
            continue
        row = decode_lenient(raw.data)  # UTF-8, else cp1252 (transforms/common/decode.py)
        if line == 1 and row.startswith("\ufeff"):  # a byte order mark is no part of the record
            row = row[1:]
        if is_blank(row):
            continue
        try:
            rec = json.loads(row)
            if not isinstance(rec, dict):
                raise ValueError("not a JSON object")
        except RecursionError:  # valid JSON nested past Python's recursion limit
            yield InputError(f"line {line}: JSON nested too deeply to read", line, leading_id(raw.data[:4096]),
                             None)
            continue
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
        qid = parse_id(rec.get("id", rec.get("_id"))) if isinstance(rec, dict) else None
    except Exception:
        return None
    if qid is None or qid.strip() == "" or has_surrogate(qid):
        return None
    return qid
