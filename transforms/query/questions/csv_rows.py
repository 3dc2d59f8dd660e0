"""CSV question files: rows -> Questions or error records, numbered by the physical line they
start on. Physical lines are cut as universal newlines cut them (\\n, \\r\\n, \\r), from bytes
read with bounded memory: a line or row over the cap reaches csv only as short stand-ins with the
same quoting state, and its row becomes an error record."""
from __future__ import annotations

import csv
import re
from typing import Iterator, Optional

from transforms.common.decode import decode_lenient
from transforms.query.questions.jsonl_lines import DEFAULT_MAX_LINE_BYTES, RawLine, iter_raw_lines
from transforms.query.records import InputError, QuestionOrError

# One CSV field may be this long; a longer one makes that row an error record, not the file.
MAX_FIELD_CHARS = 128 * 1024
_CSV_HARD_LIMIT = 64 * 1024 * 1024  # csv's own limit, far above MAX_FIELD_CHARS
_BARE_CR = re.compile(r"(?<=\r)(?!\n)")


def header_problem(header: list[str], first_line: str) -> Optional[str]:
    """Why a header gives no ids (every row would be "missing id"), with a hint when it fits."""
    if "id" in header or "_id" in header:
        return None
    for sep, name in ((";", "semicolon"), ("\t", "tab")):
        if sep in first_line and "," not in first_line:
            return (f"CSV header has no `id` column; the file looks {name}-delimited "
                    "(question CSV files are comma-separated)")
    return f"CSV header has no `id` column (columns: {', '.join(h[:40] for h in header[:10])})"


def _stand_in(raw: RawLine) -> str:
    """A short line that leaves csv in the quoting state the whole over-long line would."""
    head = raw.data.decode("utf-8", errors="replace").replace("\r", " ")  # cut mid-character, maybe
    if head.count('"') % 2 != raw.quotes % 2:
        head += '"'
    return head + "\n"


def _row_shape(physical: str, n_fields: int) -> Optional[list[str]]:
    """The fields of a continuation line when it parses as a whole row of the file."""
    try:
        fields = next(csv.reader([physical.rstrip("\r\n")]))
    except (csv.Error, StopIteration):
        return None
    return fields if len(fields) == n_fields and n_fields > 1 and fields[0].strip() else None


class _Lines:
    """The physical lines csv reads, and what is known of the row being read: whether it went
    over the cap (from then on its lines reach csv only as stand-ins of one or no quote, so a
    row never holds more than about the cap), and its continuation lines shaped like rows."""

    def __init__(self, f, max_bytes: int):
        self.f, self.max_bytes, self.n_fields, self.text = f, max_bytes, 0, ""
        self.eof = False  # csv asked for a line past the last: a row it returns now ended inside quotes
        self.new_row()

    def new_row(self) -> None:
        self.lines, self.size, self.over, self.shaped = 0, 0, False, []

    def __iter__(self):
        for raw in iter_raw_lines(self.f, self.max_bytes):
            if raw.too_long:
                parts = [(_stand_in(raw), raw.size, raw.quotes)]
            else:
                text = decode_lenient(raw.data) + "\n"
                parts = [(p, len(p), -1) for p in _BARE_CR.split(text) if p] if "\r" in text \
                    else [(text, raw.size + 1, -1)]
            for part, size, quotes in parts:
                self.lines, self.size = self.lines + 1, self.size + size
                self.over = self.over or quotes >= 0 or self.size > self.max_bytes
                if self.lines > 1:  # a continuation line: csv is inside a quoted field
                    shape = _row_shape(part, self.n_fields) if quotes < 0 and self.n_fields > 1 \
                        and part.count(",") >= self.n_fields - 1 else None  # a row has n-1 commas
                    if shape:
                        self.shaped.append((self.lines - 1, shape))
                    if self.over:  # keep only the quoting state: odd quotes close the field
                        part = '"' if (part.count('"') if quotes < 0 else quotes) % 2 else ""
                elif not self.n_fields:
                    self.text += part  # the header, for header_problem
                yield part
        self.eof = True


def read_csv_questions(f, safe, id_of, max_bytes: int = DEFAULT_MAX_LINE_BYTES) -> Iterator[QuestionOrError]:
    """CSV rows of the binary stream f -> Questions or error records; safe(rec, line) makes one
    record of a row dict and id_of(rec) reads its id (questions.py's, passed in: no import cycle).

    One bad row is one error record: a row over max_bytes, a field over MAX_FIELD_CHARS, a row
    with more fields than the header, a row csv cannot read. A quoted field may run over lines
    (whatever they look like) as long as its quote closes; a quote that never closes (the row
    runs to the end of the file inside it) is reported: the row is an error, and every swallowed
    line shaped like a row is an error record of its own (with its id), so rows in = records out.
    Every line ends in "\\n" when csv reads it, so csv asks for a line past the last only from
    inside a quoted field: a row returned after that never closed its quote.
    """
    _safe, _id_of = safe, id_of
    lines = _Lines(f, max_bytes)
    old_limit = csv.field_size_limit()
    csv.field_size_limit(_CSV_HARD_LIMIT)
    try:
        reader = csv.reader(lines)
        try:
            header = next(reader)
        except StopIteration:
            return
        except csv.Error as e:
            yield InputError(f"line 1: unreadable CSV header ({e})", 1, None, None)
            return
        header = [h.strip().lstrip("\ufeff") for h in header]
        problem = header_problem(header, lines.text)
        lines.n_fields = len(header)
        start = reader.line_num + 1
        while True:
            lines.new_row()
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
            unclosed = lines.eof  # the row ended at the end of the file, inside its quote
            swallowed = lines.shaped if unclosed else []
            if lines.over:
                cut = header[len(row) - 1] if len(row) <= len(header) else None  # the field cut short
                yield InputError(f"line {line}: the row is {lines.size} bytes, over the cap of {max_bytes} "
                                 "(questions.max_line_bytes)", line,
                                 _id_of(rec) if cut not in ("id", "_id") else None, None)
            elif problem:
                yield InputError(f"line {line}: missing id; {problem}", line, None, None)
            elif len(row) > len(header):
                yield InputError(f"line {line}: {len(row)} fields but the header "
                                 f"has {len(header)}", line, _id_of(rec), None)
            elif any(len(f) > MAX_FIELD_CHARS for f in row):
                long = [h for h, f in zip(header, row) if len(f) > MAX_FIELD_CHARS]
                yield InputError(f"line {line}: field {long[0]!r} is longer than {MAX_FIELD_CHARS} "
                                 "characters", line, _id_of(rec) if "id" not in long else None, None)
            elif unclosed:
                held = f" and holds {len(swallowed)} line(s) shaped like rows" if swallowed else ""
                yield InputError(f"line {line}: unclosed quote: a quoted field opened here runs to the end of "
                                 f"the file (line {end}){held}", line, _id_of(rec), None)
            else:
                yield _safe(rec, line)
                continue
            for offset, fields in swallowed:  # each swallowed row is a record of its own
                n = line + offset
                yield InputError(f"line {n}: swallowed by an unclosed quote on line {line}", n,
                                 _id_of(dict(zip(header, fields))), None)
    finally:
        csv.field_size_limit(old_limit)
