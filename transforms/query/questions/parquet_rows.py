"""Parquet question rows: each row's size is measured in Arrow, before it becomes Python values,
so a row over the line cap is one error record and is never copied out."""
from __future__ import annotations

from typing import Callable, Iterator

import numpy as np

from transforms.query.records import InputError, QuestionOrError

_ID_BYTES = 1024  # an id longer than this is not worth keeping in an error record


def value_bytes(arr) -> np.ndarray:
    """Bytes each row of an Arrow array holds (strings and binaries exactly, scalars as 8)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    t, n = arr.type, len(arr)
    if pa.types.is_dictionary(t):
        return value_bytes(arr.dictionary_decode())
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) \
            or pa.types.is_large_binary(t):
        return pc.fill_null(pc.binary_length(arr), 0).to_numpy(zero_copy_only=False).astype(np.int64)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        child = pc.list_flatten(arr)
        if not len(child):
            return np.zeros(n, np.int64)
        parents = pc.list_parent_indices(arr).to_numpy(zero_copy_only=False)
        return np.bincount(parents, weights=value_bytes(child), minlength=n).astype(np.int64)
    if pa.types.is_struct(t):
        out = np.zeros(n, np.int64)
        for field in arr.flatten():
            out += value_bytes(field)
        return out
    return np.full(n, 8, np.int64)


def parquet_rows(batches, first_line: int, max_bytes: int,
                 safe: Callable[[dict, int], QuestionOrError], id_of) -> Iterator[QuestionOrError]:
    """Record batches -> one Question or InputError per row, numbered from first_line."""
    line = first_line
    for batch in batches:
        batch = numbers_as_text(batch)
        sizes = np.zeros(batch.num_rows, np.int64)
        for col in batch.columns:
            sizes += value_bytes(col)
        start = 0
        for i in [*np.flatnonzero(sizes > max_bytes).tolist(), batch.num_rows]:
            if i > start:  # the rows under the cap, converted together (the fast path)
                for rec in batch.slice(start, i - start).to_pylist():
                    yield safe(rec, line)
                    line += 1
            if i < batch.num_rows:
                yield InputError(f"line {line}: the row is {int(sizes[i])} bytes, over the cap of "
                                 f"{max_bytes} (questions.max_line_bytes)", line, _small_id(batch, i, id_of), None)
                line += 1
            start = i + 1


QUESTION_COLUMNS = ("question", "text")


def numbers_as_text(batch):
    """The batch with a numeric question column as text (a question "42" written by a tool that
    typed the column as integers is a question, not a missing one: issue 35, item 18); a number
    that is a whole float (pandas' nullable integers) reads as the integer."""
    import pyarrow as pa
    import pyarrow.compute as pc
    for name in QUESTION_COLUMNS:
        if name not in batch.schema.names:
            continue
        i = batch.schema.get_field_index(name)
        t = batch.schema.field(i).type
        if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t):
            batch = batch.set_column(i, name, pc.cast(batch.column(i), pa.string()))
    return batch


def _small_id(batch, i: int, id_of):
    for name in ("id", "_id"):
        if name in batch.schema.names:
            cell = batch.column(name).slice(i, 1)
            return id_of({"id": cell[0].as_py()}) if value_bytes(cell)[0] <= _ID_BYTES else None
    return None
