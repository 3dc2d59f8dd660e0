"""Dedupe by content: identical bytes under several paths are parsed and embedded once.

The representative is the copy with the smallest key, so the choice is the same
on every runner; every other path stays recorded as a source of that content.
On an incremental run, copies that were not re-read (unchanged size and mtime)
still count when choosing the representative, and a content the live version
already holds under the same representative is not parsed again ("carried").
"""
from __future__ import annotations

import dataclasses
from typing import Iterable, Optional

import apache_beam as beam

from transforms.common.stage import Outputs, StageFn
from transforms.index.incremental import is_carried, representative
from transforms.records import Document, RawObject, UniqueObject


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


def dedupe_content(content_hash: str, copies: Iterable[RawObject], unread: Optional[list[tuple]] = None,
                   known_rep: Optional[dict] = None) -> Optional[UniqueObject]:
    """The dedupe stage function: every read copy of one content -> its UniqueObject, or
    None when the live version already holds it under the same representative (carried)."""
    copies = list(copies)
    unread = list(unread or [])
    every = [(c.uri, c.key, c.size, c.mtime) for c in copies] + unread
    if is_carried(content_hash, every, known_rep or {}):
        return None
    return pick_representative(copies, unread)


def merge_documents(docs: Iterable[Document]) -> Document:
    """JSONL records repeated verbatim in several files: one document (smallest key), every file a source."""
    docs = sorted(docs, key=lambda d: (d.key, d.doc_id))
    if len(docs) == 1:
        return docs[0]
    uris = sorted({u for d in docs for u in (d.source_uris or [d.source_uri])})
    return dataclasses.replace(docs[0], source_uris=uris)


class _PickFn(StageFn):
    """(content hash, copies) -> UniqueObject. Failures propagate (FAILED is None)."""
    STAGE = "dedupe"

    def __init__(self, unread_by_hash: dict, known_rep: dict):
        self.unread_by_hash = unread_by_hash
        self.known_rep = known_rep

    def apply(self, element, out: Outputs) -> None:
        content_hash, copies = element
        copies = list(copies)
        unique = dedupe_content(content_hash, copies, self.unread_by_hash.get(content_hash, []), self.known_rep)
        if unique is None:
            out.count("carried_objects", len(copies))  # rows come over from the live version
            return
        out.count("unique_objects")
        out.count("duplicate_objects", len(copies) - 1)
        out.emit(unique)


class DedupeByContent(beam.PTransform):
    """PCollection[RawObject] -> PCollection[UniqueObject] (carried contents dropped).

    Example:
        uniques = raws | "DedupeByContent" >> DedupeByContent(plan.extra_copies(), plan.known_rep)
    """

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


class _PickDocumentFn(StageFn):
    """(content hash, documents) -> one Document listing every file it came from."""
    STAGE = "dedupe_documents"

    def apply(self, element, out: Outputs) -> None:
        _, docs = element
        docs = list(docs)
        out.count("duplicate_documents", len(docs) - 1)
        out.emit(merge_documents(docs))


class DedupeDocuments(beam.PTransform):
    """PCollection[Document] -> one Document per content hash (chunk ids derive from it).

    Example:
        documents = parsed.documents | "DedupeDocuments" >> DedupeDocuments()
    """

    def expand(self, docs):
        return (docs
                | "KeyByDocumentHash" >> beam.Map(lambda d: (d.content_hash, d))
                | "GroupByDocumentHash" >> beam.GroupByKey()
                | "PickDocument" >> beam.ParDo(_PickDocumentFn()).with_output_types(Document))
