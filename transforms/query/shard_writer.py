"""One answer shard written as a stream: rows go to a temp file batch by batch, and the part
appears whole (rename, or one upload on object storage) only when the last row is in.

The answer stage writes each batch of answers as soon as it is answered, so a worker holds one
batch of answer records, not a shard's (a shard is `output.questions_per_shard` questions).

Example:
    with ShardWriter("out/answers.jsonl.parts/shard-00000-of-00001.jsonl", "jsonl") as w:
        for row in rows:
            w.write(row)
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from typing import Optional

from transforms.common import storage
from transforms.common.s3 import is_s3

# Columns written as JSON text in Parquet: one schema for every shard, whatever they hold.
NESTED_COLUMNS = ("citations", "removed", "conflicts", "retrieved", "retrieved_docs", "trace")
PARQUET_ROW_GROUP = 1024  # rows buffered before a row group is written


def jsonl_line(row: dict) -> bytes:
    line = json.dumps(row, ensure_ascii=False, default=str) + "\n"
    try:
        return line.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: JSON's own \udXXX escape keeps the file UTF-8
        return (json.dumps(row, ensure_ascii=True, default=str) + "\n").encode("ascii")


def answer_schema(with_trace: bool):
    """The Arrow schema of an answer row (AnswerRecord.to_row), fixed so that every batch of
    every shard has the same one whatever its values (an all-null column would infer null)."""
    import pyarrow as pa
    fields = [("id", pa.string()), ("question", pa.string()), ("answer", pa.string()),
              ("status", pa.string()), ("error", pa.string()), ("citations", pa.string()),
              ("invalid_citations", pa.int64()), ("unsupported_sentences_removed", pa.int64()),
              ("unfound_quotes_removed", pa.int64()), ("removed", pa.string()), ("evidence_score", pa.float64()),
              ("confidence", pa.float64()),
              ("conflicts", pa.string()), ("retrieved", pa.string()), ("retrieved_docs", pa.string()),
              ("index_version", pa.string())]
    if with_trace:
        fields.append(("trace", pa.string()))
    return pa.schema(fields)


def _parquet_value(key: str, value):
    if key in NESTED_COLUMNS:
        return json.dumps(value)
    if isinstance(value, str):  # Parquet strings are UTF-8: a lone surrogate becomes U+FFFD
        from transforms.query.questions.validate import has_surrogate, without_surrogates
        return without_surrogates(value) if has_surrogate(value) else value
    return value


class ShardWriter:
    """Context manager: write(row) any number of times; the part exists after a clean exit only
    (an exception leaves no part and no temp file behind)."""

    def __init__(self, path: str, fmt: str, with_trace: bool = False):
        if fmt not in ("jsonl", "parquet"):
            raise ValueError(f"output format {fmt!r}: expected jsonl or parquet")
        self.path, self.fmt, self.count = path, fmt, 0
        self._tmpdir: Optional[str] = None
        self._rows: list[dict] = []
        self._file = self._pq = None
        self._schema = answer_schema(with_trace)

    def __enter__(self) -> "ShardWriter":
        if is_s3(self.path):  # written locally, then one PUT: the shard exists whole or not at all
            self._tmpdir = tempfile.mkdtemp(prefix="ragbeam-part-")
            self._local = os.path.join(self._tmpdir, os.path.basename(self.path))
        else:
            self._local = self.path
        self._tmp = self._local + ".tmp"
        if self.fmt == "jsonl":
            self._file = open(self._tmp, "wb")
        return self

    def write(self, row: dict) -> None:
        self.count += 1
        if self.fmt == "jsonl":
            self._file.write(jsonl_line(row))
            return
        self._rows.append(row)
        if len(self._rows) >= PARQUET_ROW_GROUP:
            self._flush_parquet()

    def _flush_parquet(self) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq
        if self._pq is None:
            self._pq = pq.ParquetWriter(self._tmp, self._schema, compression="zstd")
        names = self._schema.names
        table = pa.Table.from_pylist([{k: _parquet_value(k, r.get(k)) for k in names} for r in self._rows],
                                     schema=self._schema)
        self._pq.write_table(table)
        self._rows = []

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if exc_type is None:
                self._finish()
        finally:
            self._close_quietly()
            if exc_type is not None and os.path.exists(self._tmp):
                os.remove(self._tmp)
            if self._tmpdir:
                shutil.rmtree(self._tmpdir, ignore_errors=True)

    def _finish(self) -> None:
        if self.fmt == "jsonl":
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()
            self._file = None
        else:
            if self._rows or self._pq is None:  # an empty shard still gets its (empty) file
                self._flush_parquet()
            self._pq.close()
            self._pq = None
        os.replace(self._tmp, self._local)  # the shard exists whole or not at all
        if self._tmpdir:
            storage.upload_file(self._local, self.path)

    def _close_quietly(self) -> None:
        for h in (self._file, self._pq):
            if h is not None:
                try:
                    h.close()
                except Exception:  # already failing: the temp file is removed next
                    pass
        self._file = self._pq = None
