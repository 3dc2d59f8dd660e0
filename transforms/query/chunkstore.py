"""The chunk rows the answer job shows and quotes, held in memory from engine open.

retrieve.fetch_chunks asks DuckDB for each batch's rows (one SQL query with an IN list
per batch); measured on 1,488 chunks it made retrieval without question embedding 10x
slower than a plain Python list. ChunkTable reads the display columns once, in chunk_no
order, into an Arrow table and takes rows by position. Memory is about the size of the
text itself (~1 KB a chunk: ~45 MB for 43k chunks).
"""
from __future__ import annotations

import json

import numpy as np

from transforms.query.records import Candidate

COLUMNS = ("chunk_no", "chunk_id", "doc_id", "text", "context", "title", "heading_path", "page",
           "source_uri", "acl", "metadata")


class ChunkTable:
    def __init__(self, table):
        self.table = table
        self.n = table.num_rows
        # doc ids as a numpy object array: document-level aggregation and eval look them up a lot
        self.doc_id = np.array(table.column("doc_id").to_pylist(), dtype=object)

    @classmethod
    def from_artifact(cls, con) -> "ChunkTable":
        t = con.execute(f"SELECT {', '.join(COLUMNS)} FROM chunks ORDER BY chunk_no").to_arrow_table()
        return cls(t.combine_chunks())

    def candidates(self, chunk_nos) -> list[Candidate]:
        """Candidates (no scores yet) in the order asked, from the same columns and values as
        retrieve.fetch_chunks; -1 (no hit) slots are skipped. The one place chunk rows become
        Candidates."""
        wanted = np.asarray([int(c) for c in np.asarray(chunk_nos).reshape(-1) if c >= 0], np.int64)
        if not len(wanted):
            return []
        uniq, inv = np.unique(wanted, return_inverse=True)
        got = self.table.take(uniq).to_pylist()
        for r in got:
            r["metadata"] = json.loads(r["metadata"]) if r["metadata"] else {}
        cands = [Candidate.from_row(r) for r in got]
        return [cands[i] for i in inv]

    def nbytes(self) -> int:
        return int(self.table.nbytes)
