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
from transforms.query.questions.jsonl_lines import DEFAULT_MAX_LINE_BYTES
from transforms.query.records import QuestionOrError
from transforms.query.questions.read import _id_of, _safe, detect_format, open_range, read_jsonl, read_questions

PIECE_BYTES = 8 * 1024 * 1024
_BLOCK = 1024 * 1024  # the planner's read size


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


def _plan_jsonl(uri: str, size: int, piece_bytes: int, s3=None) -> list[tuple[int, int, int]]:
    """(start, end, lines) of each piece: cut at the first "\n" at or past each piece_bytes mark,
    in one pass over 1 MiB blocks, so a line of any length costs linear time and bounded memory."""
    cuts, start, n, pos, last = [], 0, 0, 0, b"\n"
    with open_range(uri, 0, size, s3) as f:
        while True:
            block = f.read(_BLOCK)
            if not block:
                break
            i = 0
            while True:
                mark = max(i, start + piece_bytes - 1 - pos)  # where this piece may end, in the block
                j = block.find(b"\n", mark) if mark < len(block) else -1
                if j < 0:
                    n += block.count(b"\n", i)
                    break
                n += block.count(b"\n", i, j + 1)
                cuts.append((start, pos + j + 1, n))
                start, n, i = pos + j + 1, 0, j + 1
            pos, last = pos + len(block), block[-1:]
    if start < pos:  # the rest, its last line perhaps without a line end
        cuts.append((start, pos, n + (last != b"\n")))
    return cuts


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


def parquet_file(uri: str, size: Optional[int] = None, s3=None):
    """A ParquetFile read by ranges (its footer, then the row groups asked for)."""
    import pyarrow.parquet as pq
    if size is None:
        st = storage.stat(uri, s3)
        if st is None:
            raise FileNotFoundError(uri)
        size = st["size"]
    return pq.ParquetFile(io.BufferedReader(_RangeFile(uri, size, s3), buffer_size=1 << 20))


def plan_pieces(qfile, s3=None, piece_bytes: int = PIECE_BYTES,
                max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> tuple[list[dict], int]:
    """(pieces, number of input lines/rows) of a question file (its question_file.QuestionFile);
    each piece carries the line cap and the file's size."""
    uri, fmt = qfile.uri, qfile.fmt
    base = {"uri": uri, "fmt": fmt, "max_line_bytes": max_line_bytes, "size": qfile.size}
    if qfile.size is None:  # other Beam filesystems: one piece, read as before
        return [{**base, "whole": True}], 0
    if fmt == "parquet":
        pieces, line = [], 1
        for g, rows in enumerate(qfile.row_groups):
            pieces.append({**base, "row_group": g, "first_line": line})
            line += rows
        return pieces, line - 1
    if fmt == "csv":
        n = sum(1 for _ in read_questions(uri, fmt, s3=s3, max_line_bytes=max_line_bytes))
        return [{**base, "whole": True}], n
    pieces, line = [], 1
    for start, end, lines in _plan_jsonl(uri, qfile.size, piece_bytes, s3):
        pieces.append({**base, "start": start, "end": end, "first_line": line})
        line += lines
    return pieces, line - 1


def read_piece(piece: dict, s3=None) -> Iterator[QuestionOrError]:
    uri, fmt = piece["uri"], piece["fmt"]
    cap = piece.get("max_line_bytes", DEFAULT_MAX_LINE_BYTES)
    if piece.get("whole"):
        yield from read_questions(uri, fmt, s3=s3, max_line_bytes=cap)
        return
    if fmt == "parquet":
        from transforms.query.questions.parquet_rows import parquet_rows
        pf = parquet_file(uri, piece.get("size"), s3)
        yield from parquet_rows(pf.iter_batches(batch_size=10000, row_groups=[piece["row_group"]]),
                                piece["first_line"], cap, _safe, _id_of)
        return
    with open_range(uri, piece["start"], piece["end"], s3) as f:
        yield from read_jsonl(f, piece["first_line"], cap)


def shards_for(n_questions: int, questions_per_shard: int, fixed: Optional[int] = None) -> int:
    """Answer shards: `output.shards` when set, else one per `questions_per_shard` questions."""
    if fixed:
        return fixed
    return max(1, -(-n_questions // questions_per_shard))
