"""Question files read inside the answer pipeline, in pieces that spread over workers.

The driver plans pieces without parsing: a JSONL file is cut into byte ranges of about
`piece_bytes` at line ends (each piece knows the line number it starts at, so records and
error messages keep their file line numbers), a Parquet file into its row groups. The
pipeline reads each piece in a DoFn (ranged GETs on object storage), so no step ever holds
the whole file and a 10M-line file is read by many workers. A CSV file is one piece: a
quoted field may span lines, so it cannot be cut at line ends.
"""
from __future__ import annotations

import io
from typing import Iterator, Optional

from transforms.common import storage
from transforms.common.s3 import is_s3, split_s3_uri
from transforms.query.records import QuestionOrError
from transforms.query.questions import _safe, detect_format, read_jsonl_rows, read_questions

PIECE_BYTES = 8 * 1024 * 1024


def _read_range(uri: str, start: int, end: int, s3=None) -> bytes:
    if end <= start:
        return b""
    if is_s3(uri):
        bucket, key = split_s3_uri(uri)
        return storage.s3_client(s3).get_object(Bucket=bucket, Key=key,
                                                Range=f"bytes={start}-{end - 1}")["Body"].read()
    with open(uri, "rb") as f:
        f.seek(start)
        return f.read(end - start)


def _count_lines(data: bytes) -> int:
    # the same line splitting as read_questions (TextIOWrapper, newline=""): \n, \r\n and \r
    return sum(1 for _ in io.StringIO(data.decode("utf-8", errors="replace"), newline=""))


class _RangeFile(io.RawIOBase):
    """A seekable read-only file over ranged reads (Parquet footers and row groups on S3)."""

    def __init__(self, uri: str, size: int, s3=None):
        self.uri, self.size, self.s3, self.pos = uri, size, s3, 0

    def readable(self):
        return True

    def seekable(self):
        return True

    def tell(self):
        return self.pos

    def seek(self, offset, whence=0):
        self.pos = offset if whence == 0 else self.pos + offset if whence == 1 else self.size + offset
        return self.pos

    def readinto(self, b):
        data = _read_range(self.uri, self.pos, min(self.pos + len(b), self.size), self.s3)
        b[:len(data)] = data
        self.pos += len(data)
        return len(data)


def _parquet_file(uri: str, s3=None):
    import pyarrow.parquet as pq
    st = storage.stat(uri, s3)
    if st is None:
        raise FileNotFoundError(uri)
    return pq.ParquetFile(io.BufferedReader(_RangeFile(uri, st["size"], s3), buffer_size=1 << 20))


def plan_pieces(uri: str, s3=None, piece_bytes: int = PIECE_BYTES) -> tuple[list[dict], int]:
    """(pieces, number of input lines/rows) of a question file."""
    fmt = detect_format(uri)
    if "://" in uri and not is_s3(uri):  # other Beam filesystems: one piece, read as before
        return [{"uri": uri, "fmt": fmt, "whole": True}], 0
    if fmt == "parquet":
        pf = _parquet_file(uri, s3)
        pieces, line = [], 1
        for g in range(pf.metadata.num_row_groups):
            pieces.append({"uri": uri, "fmt": fmt, "row_group": g, "first_line": line})
            line += pf.metadata.row_group(g).num_rows
        return pieces, line - 1
    st = storage.stat(uri, s3)
    if st is None:
        raise FileNotFoundError(uri)
    if fmt == "csv":
        n = 0
        for rec in read_questions(uri, fmt, s3=s3):
            n += 1
        return [{"uri": uri, "fmt": fmt, "whole": True}], n
    pieces, start, line, size = [], 0, 1, st["size"]
    while start < size:
        end = min(start + piece_bytes, size)
        data = _read_range(uri, start, end, s3)
        while end < size and not data.endswith(b"\n"):  # extend to the next line end
            more = _read_range(uri, end, min(end + 65536, size), s3)
            cut = more.find(b"\n")
            more = more if cut < 0 else more[:cut + 1]
            data += more
            end += len(more)
        pieces.append({"uri": uri, "fmt": fmt, "start": start, "end": end, "first_line": line})
        line += _count_lines(data)
        start = end
    return pieces, line - 1


def read_piece(piece: dict, s3=None) -> Iterator[QuestionOrError]:
    uri, fmt = piece["uri"], piece["fmt"]
    if piece.get("whole"):
        yield from read_questions(uri, fmt, s3=s3)
        return
    if fmt == "parquet":
        pf = _parquet_file(uri, s3)
        line = piece["first_line"]
        for batch in pf.iter_batches(batch_size=10000, row_groups=[piece["row_group"]]):
            for rec in batch.to_pylist():
                yield _safe(rec, line)
                line += 1
        return
    text = _read_range(uri, piece["start"], piece["end"], s3).decode("utf-8", errors="replace")
    yield from read_jsonl_rows(io.StringIO(text, newline=""), first_line=piece["first_line"])


def shards_for(n_questions: int, questions_per_shard: int, fixed: Optional[int] = None) -> int:
    """Answer shards: `output.shards` when set, else one per `questions_per_shard` questions."""
    if fixed:
        return fixed
    return max(1, -(-n_questions // questions_per_shard))
