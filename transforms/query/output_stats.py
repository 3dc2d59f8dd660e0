"""Answer-job output checks: whole-file problems of the question file before any pipeline
starts, a finished output never overwritten by another job, and counts of the whole output."""
from __future__ import annotations

import json
import os
from typing import Optional


class QuestionFileError(ValueError):
    """The question file as a whole cannot be read: missing, empty, unknown format, not Parquet."""


class OutputExistsError(RuntimeError):
    """--output holds the finished output of a different job."""


def check_question_file(uri: str, s3=None) -> None:
    from transforms.common import storage
    from transforms.query.questions import detect_format
    try:
        fmt = detect_format(uri)
    except ValueError as e:
        raise QuestionFileError(str(e)) from None
    if "://" not in uri:
        if not os.path.exists(uri):
            raise QuestionFileError(f"{uri}: question file not found")
        if os.path.isdir(uri):
            raise QuestionFileError(f"{uri}: is a directory, not a question file")
        if os.path.getsize(uri) == 0:
            raise QuestionFileError(f"{uri}: question file is empty")
    else:
        try:
            if not storage.exists(uri, s3):
                raise QuestionFileError(f"{uri}: question file not found")
        except QuestionFileError:
            raise
        except Exception as e:
            raise QuestionFileError(f"{uri}: cannot read the question file ({type(e).__name__}: {e})") from None
    if fmt == "parquet":
        import pyarrow.parquet as pq
        from transforms.query.questions import _open_binary
        try:
            with _open_binary(uri, s3) as f:
                pq.ParquetFile(f).metadata
        except Exception as e:
            raise QuestionFileError(f"{uri}: not a readable Parquet file ({type(e).__name__}: {e})") from None


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


def count_output(output: str, fmt: str) -> dict:
    """Status counts over the whole joined output (a resumed run counts every shard)."""
    counts = {"answered": 0, "not_found": 0, "unsupported": 0, "error": 0, "invalid_citations": 0}

    def add(status: Optional[str], invalid) -> None:
        counts[status if status in counts else "error"] += 1
        counts["invalid_citations"] += int(invalid or 0)

    from transforms.common import storage
    data = storage.read_bytes(output)
    if fmt == "parquet":
        import io

        import pyarrow.parquet as pq
        t = pq.read_table(io.BytesIO(data))
        if t.num_rows:
            invalid = t.column("invalid_citations").to_pylist() if "invalid_citations" in t.column_names \
                else [0] * t.num_rows
            for st, inv in zip(t.column("status").to_pylist(), invalid):
                add(st, inv)
    else:
        for line in data.decode("utf-8").splitlines():
            if line.strip():
                rec = json.loads(line)
                add(rec.get("status"), rec.get("invalid_citations"))
    return counts
