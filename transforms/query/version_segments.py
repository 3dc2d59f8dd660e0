"""A version's segments as the answer side sees them: global chunk numbers, rows, sentences.

The manifest lists the version's segments in order; chunk number g is row g - offset[i] of
segment i (offsets are the running sum of the segments' row counts, tombstoned rows included).
Segments open lazily and memory-mapped, so taking a few candidates' rows touches only their
pages: the gather side of the answer job never loads a segment whole.
"""
from __future__ import annotations

import io
import json
import os
from typing import Optional

import numpy as np

from transforms.common import storage
from transforms.common.errors import ActionableError
from transforms.index.segment_plan import df_file, tombstones_file
from transforms.index.segment_store import index_of_version, local_segment
from transforms.index.segments import Segment
from transforms.query.records import Candidate


class NotSegmentedError(ActionableError):
    """A version built before segments: it is refused, with what to run."""


def _load_npy(uri: str) -> np.ndarray:
    if os.path.exists(uri):
        return np.load(uri)
    return np.load(io.BytesIO(storage.read_bytes(uri)))


class VersionSegments:
    def __init__(self, version_dir: str, manifest: dict):
        entries = manifest.get("segments")
        if not entries:
            raise NotSegmentedError(
                f"{version_dir}: index version {manifest.get('version')} was built before segments (it has one "
                "index.duckdb and no `segments` in its manifest); this ragbeam reads only segmented indexes: "
                "re-index it (`ragbeam index` over the same input, or `ragbeam build-artifacts --index INDEX`, "
                "which builds the segments from the version's shards)")
        self.version_dir, self.entries = version_dir, entries
        self.index_dir = index_of_version(version_dir)
        self.sizes = np.array([int(e["chunks"]) for e in entries], np.int64)
        self.offsets = np.concatenate([[0], np.cumsum(self.sizes)]).astype(np.int64)
        self.n = int(self.offsets[-1])
        bm = manifest.get("bm25") or {}
        self.num_docs, self.avgdl = int(bm.get("num_docs", 0)), float(bm.get("avgdl", 0.0))
        self._segs: dict[int, Segment] = {}
        self._sent_off: Optional[np.ndarray] = None
        self.sentences = _SentenceView(self)

    def __len__(self) -> int:
        return len(self.entries)

    def segment(self, i: int) -> Segment:
        s = self._segs.get(i)
        if s is None:
            e = self.entries[i]
            s = self._segs[i] = Segment(local_segment(self.index_dir, e["id"], e.get("meta_sha256")))
        return s

    def release(self, i: int) -> None:
        self._segs.pop(i, None)

    def stats(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """(global live df aligned with the segment's terms, its tombstoned rows) in this version."""
        sid = self.entries[i]["id"]
        return _load_npy(df_file(self.version_dir, sid)), _load_npy(tombstones_file(self.version_dir, sid))

    def locate(self, nos) -> tuple[np.ndarray, np.ndarray]:
        nos = np.asarray(nos, np.int64)
        seg = np.searchsorted(self.offsets, nos, side="right") - 1
        return seg, nos - self.offsets[seg]

    def candidates(self, nos) -> list[Candidate]:
        """Candidates (no scores yet) for global chunk numbers, in the order asked."""
        wanted = np.asarray([int(c) for c in np.asarray(nos).reshape(-1) if c >= 0], np.int64)
        if not len(wanted):
            return []
        uniq, inv = np.unique(wanted, return_inverse=True)
        seg, local = self.locate(uniq)
        rows: list[dict] = []
        for i in np.unique(seg):
            sel = seg == i
            got = self.segment(int(i)).rows.take(local[sel]).to_pylist()
            for no, r in zip(uniq[sel], got):
                r["chunk_no"] = int(no)
                rows.append(r)
        by_no = {}
        for r in rows:
            r["metadata"] = json.loads(r["metadata"]) if r["metadata"] else {}
            by_no[r["chunk_no"]] = Candidate.from_row(r)
        cands = [by_no[int(c)] for c in uniq]
        return [cands[i] for i in inv]

    def column(self, name: str, nos) -> list:
        seg, local = self.locate(nos)
        out = [None] * len(local)
        for i in np.unique(seg):
            sel = np.flatnonzero(seg == i)
            vals = self.segment(int(i)).rows.column(name).take(local[sel]).to_pylist()
            for k, v in zip(sel, vals):
                out[k] = v
        return out

    def sentence_offsets(self) -> np.ndarray:
        if self._sent_off is None:
            counts = [int(self.segment(i).meta.get("sentences", len(self.segment(i).sent_start)))
                      for i in range(len(self))]
            self._sent_off = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        return self._sent_off


class _SentenceView:
    """The SentenceStore interface (has_vectors, rows, start, end, vec, inv_norm) over a version's
    segments, in a global sentence-row space; SentenceAnswerer reads it unchanged."""

    def __init__(self, vs: VersionSegments):
        self.vs = vs
        self.has_vectors = _ByChunk(vs)
        self.start = _BySentence(vs, "sent_start")
        self.end = _BySentence(vs, "sent_end")
        self.vec = _BySentence(vs, "sent_vec")
        self.inv_norm = _BySentence(vs, None)

    def rows(self, chunk_no: int) -> slice:
        i, local = (int(x[0]) for x in self.vs.locate([chunk_no]))
        seg, off = self.vs.segment(i), int(self.vs.sentence_offsets()[i])
        r = seg.sentence_rows(local)
        return slice(r.start + off, r.stop + off)


class _ByChunk:
    def __init__(self, vs: VersionSegments):
        self.vs = vs

    def __getitem__(self, no: int) -> bool:
        i, local = (int(x[0]) for x in self.vs.locate([no]))
        return bool(self.vs.segment(i).sent_has[local])


class _BySentence:
    def __init__(self, vs: VersionSegments, attr: Optional[str]):
        self.vs, self.attr = vs, attr

    def __getitem__(self, r: slice):
        offs = self.vs.sentence_offsets()
        i = int(np.searchsorted(offs, r.start, side="right") - 1)
        seg = self.vs.segment(i)
        local = slice(r.start - int(offs[i]), r.stop - int(offs[i]))
        if self.attr is None:  # inverse norms of the int8 rows
            v = np.asarray(seg.sent_vec[local], np.float32)
            return (1.0 / np.clip(np.linalg.norm(v, axis=1), 1e-12, None)).astype(np.float32)
        return np.asarray(getattr(seg, self.attr)[local])
