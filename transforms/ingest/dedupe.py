"""Dedupe by content: identical bytes under several paths are parsed and embedded once.

The representative is the copy with the smallest key, so the choice is the same
on every runner; every other path stays recorded as a source of that content.
On an incremental run, copies that were not re-read (unchanged size and mtime)
still count when choosing the representative, and a content the live version
already holds under the same representative is not parsed again ("carried").
"""
from __future__ import annotations

from typing import Iterable, Optional

import apache_beam as beam
from apache_beam.metrics import Metrics

from transforms.index.incremental import is_carried, representative
from transforms.records import RawObject, UniqueObject

from transforms.common.counters import NAMESPACE  # noqa: E402


def pick_representative(copies: Iterable[RawObject],
                        unread: Optional[list[tuple]] = None) -> UniqueObject:
    """All copies of one content -> one UniqueObject listing every source uri.

    `unread` are (uri, key, size, mtime) of copies known by hash but not read.
    """
    copies = list(copies)
    every = [(c.uri, c.key, c.size, c.mtime) for c in copies] + list(unread or [])
    uri, key, size, mtime = representative(every)
    data = copies[0].data  # same content hash, so the same bytes
    raw = RawObject(uri=uri, key=key, data=data, size=size, mtime=mtime, content_hash=copies[0].content_hash)
    return UniqueObject(raw=raw, source_uris=tuple(sorted({c[0] for c in every})))


class _PickFn(beam.DoFn):
    def __init__(self, unread_by_hash: dict, known_rep: dict):
        self.unread_by_hash = unread_by_hash
        self.known_rep = known_rep
        self.unique = Metrics.counter(NAMESPACE, "unique_objects")
        self.duplicates = Metrics.counter(NAMESPACE, "duplicate_objects")
        self.carried = Metrics.counter(NAMESPACE, "carried_objects")

    def process(self, element):
        content_hash, copies = element
        copies = list(copies)
        unread = self.unread_by_hash.get(content_hash, [])
        every = [(c.uri, c.key, c.size, c.mtime) for c in copies] + unread
        if is_carried(content_hash, every, self.known_rep):
            self.carried.inc(len(copies))  # rows come over from the live version
            return
        self.unique.inc()
        self.duplicates.inc(len(copies) - 1)
        yield pick_representative(copies, unread)


class DedupeByContent(beam.PTransform):
    """PCollection[RawObject] -> PCollection[UniqueObject] (carried contents dropped)."""

    def __init__(self, unread_by_hash: Optional[dict] = None, known_rep: Optional[dict] = None):
        super().__init__()
        self.unread_by_hash = unread_by_hash or {}
        self.known_rep = known_rep or {}

    def expand(self, raws):
        return (raws
                | "KeyByContentHash" >> beam.Map(lambda r: (r.content_hash, r))
                | "GroupByContentHash" >> beam.GroupByKey()
                | "PickRepresentative" >> beam.ParDo(_PickFn(self.unread_by_hash, self.known_rep))
                .with_output_types(UniqueObject))


class _PickDocumentFn(beam.DoFn):
    """JSONL records repeated verbatim in several files: one document, every file a source."""

    def __init__(self):
        self.duplicates = Metrics.counter(NAMESPACE, "duplicate_documents")

    def process(self, element):
        import dataclasses
        _, docs = element
        docs = sorted(docs, key=lambda d: (d.key, d.doc_id))
        self.duplicates.inc(len(docs) - 1)
        uris = sorted({u for d in docs for u in (d.source_uris or [d.source_uri])})
        yield dataclasses.replace(docs[0], source_uris=uris) if len(docs) > 1 else docs[0]


class DedupeDocuments(beam.PTransform):
    """PCollection[Document] -> one Document per content hash (chunk ids derive from it)."""

    def expand(self, docs):
        from transforms.records import Document
        return (docs
                | "KeyByDocumentHash" >> beam.Map(lambda d: (d.content_hash, d))
                | "GroupByDocumentHash" >> beam.GroupByKey()
                | "PickDocument" >> beam.ParDo(_PickDocumentFn()).with_output_types(Document))
