"""The question file as one value: its format, size and version, read once.

`inspect_question_file` refuses whole-file problems (missing, a directory, empty, compressed,
a CSV header that cannot work, unreadable Parquet) and returns a `QuestionFile` that the
answer job's check, its piece planner and its run fingerprint all share, so the file is
sniffed once and stat'ed once (on S3: one HEAD, not four).
"""
from __future__ import annotations

import io
import os
from dataclasses import dataclass
from typing import Optional

from transforms.common import storage
from transforms.common.s3 import is_s3
from transforms.query.questions.read import detect_format

HEAD_BYTES = 65536  # what the content check reads of a text question file


class QuestionFileError(ValueError):
    """The question file as a whole cannot be read: missing, empty, unknown format, not Parquet."""


# A text question file that starts like one of these is refused whole (not read): one
# "unreadable JSON" record, or a missing id on every row, would hide what is wrong.
_MAGIC = ((b"\x1f\x8b", "gzip-compressed (it starts with the gzip bytes 1f 8b); decompress it first"),
          (b"BZh", "bzip2-compressed; decompress it first"),
          (b"\x28\xb5\x2f\xfd", "zstd-compressed; decompress it first"),
          (b"\xfd7zXZ\x00", "xz-compressed; decompress it first"),
          (b"PK\x03\x04", "a zip archive; extract it first"),
          (b"PAR1", "a Parquet file; name it .parquet"))


def content_problem(head: bytes, fmt: str) -> Optional[str]:
    """Why a JSONL or CSV file cannot be read as one, from its first bytes; None if it may be."""
    for magic, what in _MAGIC:
        if head.startswith(magic):
            return f"is {what} (question files are plain {fmt.upper()} text)"
    problem = encoding_problem(head, fmt)
    if problem:
        return problem
    if fmt == "csv" and b"\n" in head:
        import csv

        from transforms.common.decode import decode_lenient
        from transforms.query.questions.csv_rows import header_problem
        first = decode_lenient(head.split(b"\n", 1)[0]).lstrip("\ufeff")
        try:
            header = [h.strip() for h in next(csv.reader([first.rstrip("\r")]))]
        except (csv.Error, StopIteration):
            return None
        return header_problem(header, first)
    return None


def encoding_problem(head: bytes, fmt: str) -> Optional[str]:
    """Why a text question file in UTF-16 or UTF-32 is refused whole (issue 35, item 13): its
    lines are cut at the byte b"\\n", which such text does not have, so every record would be an
    error without its id. Named by its byte order mark, or by its NUL bytes when it has none."""
    from transforms.common.decode import WIDE, bom_encoding
    encoding = bom_encoding(head)
    if encoding in WIDE:
        return (f"is {encoding} text (it starts with that byte order mark); question files are UTF-8 "
                f"{fmt.upper()}: convert it first, e.g. iconv -f {encoding} -t UTF-8")
    sample = head[:4096]
    if sample and sample.count(b"\x00") * 4 >= len(sample):  # ASCII in UTF-16/32: every 2nd or 4th byte
        wide = "UTF-32" if sample.count(b"\x00") * 4 >= len(sample) * 3 else "UTF-16"
        return (f"holds NUL bytes between its characters: {wide} text without a byte order mark? Question "
                f"files are UTF-8 {fmt.upper()}: convert it first, e.g. iconv -f {wide}LE -t UTF-8")
    return None


@dataclass(frozen=True)
class QuestionFile:
    uri: str
    fmt: str  # jsonl | csv | parquet
    size: Optional[int]  # None on a Beam filesystem other than local and S3
    mtime: Optional[float]
    etag: Optional[str]  # S3 only
    row_groups: tuple[int, ...] = ()  # Parquet: the rows of each row group

    def version(self) -> dict:
        """What says the file is the same one (the answer job's resume fingerprint)."""
        out = {"questions": self.uri, "questions_size": self.size, "questions_mtime": self.mtime}
        if self.etag:
            out["questions_etag"] = self.etag
        return out


def inspect_question_file(uri: str, s3=None) -> QuestionFile:
    try:
        fmt = detect_format(uri)
    except ValueError as e:
        raise QuestionFileError(str(e)) from None
    st = _stat(uri, s3)
    size = st["size"] if st else None
    if fmt == "parquet":
        return QuestionFile(uri, fmt, size, st and st["mtime"], st and st["etag"],
                            _row_groups(uri, size, s3, check_columns=True))
    problem = content_problem(_head(uri, size, s3), fmt)
    if problem:
        raise QuestionFileError(f"{uri}: {problem}")
    return QuestionFile(uri, fmt, size, st and st["mtime"], st and st["etag"])


def describe_question_file(uri: str, s3=None) -> QuestionFile:
    """The record without the whole-file checks (for a caller that plans a file it has checked,
    or a test): a missing file is FileNotFoundError, an unknown name ValueError."""
    fmt = detect_format(uri)
    st = storage.stat(uri, s3) if "://" not in uri or is_s3(uri) else None
    if st is None and ("://" not in uri or is_s3(uri)):
        raise FileNotFoundError(uri)
    size = st["size"] if st else None
    groups = _row_groups(uri, size, s3) if fmt == "parquet" else ()
    return QuestionFile(uri, fmt, size, st and st["mtime"], st and st["etag"], groups)


def _stat(uri: str, s3) -> Optional[dict]:
    if "://" not in uri:
        if os.path.isdir(uri):
            raise QuestionFileError(f"{uri}: is a directory, not a question file")
        st = storage.stat(uri)
        if st is None:
            raise QuestionFileError(f"{uri}: question file not found")
        if st["size"] == 0:
            raise QuestionFileError(f"{uri}: question file is empty")
        return st
    try:
        if is_s3(uri):
            st = storage.stat(uri, s3)
            if st is None:
                raise QuestionFileError(f"{uri}: question file not found")
            return st
        if not storage.exists(uri, s3):  # another Beam filesystem: no size, read whole
            raise QuestionFileError(f"{uri}: question file not found")
        return None
    except QuestionFileError:
        raise
    except Exception as e:
        raise QuestionFileError(f"{uri}: cannot read the question file ({type(e).__name__}: {e})") from None


def _head(uri: str, size: Optional[int], s3) -> bytes:
    if "://" not in uri:
        with open(uri, "rb") as f:
            return f.read(HEAD_BYTES)
    if size is not None:
        from transforms.query.questions.pieces import _read_range
        return _read_range(uri, 0, min(HEAD_BYTES, size), s3)
    from transforms.query.questions.read import _open_binary
    with _open_binary(uri, s3) as f:
        return f.read(HEAD_BYTES)


def _row_groups(uri: str, size: Optional[int], s3, check_columns: bool = False) -> tuple[int, ...]:
    import pyarrow.parquet as pq
    from transforms.query.questions.pieces import parquet_file
    try:
        if size is None:
            from transforms.query.questions.read import _open_binary
            with _open_binary(uri, s3) as f:
                md = pq.ParquetFile(f).metadata
        else:
            md = parquet_file(uri, size, s3).metadata
        groups = tuple(md.row_group(g).num_rows for g in range(md.num_row_groups))
        names = md.schema.to_arrow_schema().names
    except Exception as e:
        raise QuestionFileError(f"{uri}: not a readable Parquet file ({type(e).__name__}: {e})") from None
    if check_columns and "id" not in names and "_id" not in names:  # as a CSV header without one
        raise QuestionFileError(f"{uri}: Parquet file has no `id` column, so no row has an id (columns: "
                                f"{', '.join(n[:40] for n in names[:10])})")
    return groups
