"""Dedupe by content: identical bytes under several paths are parsed and embedded once.

The representative is the smallest key, so the choice is the same on every
runner; every other path stays recorded as a source of that content.
"""
from __future__ import annotations

from typing import Iterable

import apache_beam as beam
from apache_beam.metrics import Metrics

from transforms.records import RawObject, UniqueObject

NAMESPACE = "ragbeam"


def pick_representative(copies: Iterable[RawObject]) -> UniqueObject:
    """All copies of one content -> one UniqueObject listing every source uri."""
    copies = sorted(copies, key=lambda r: (r.key, r.uri))
    return UniqueObject(raw=copies[0], source_uris=tuple(sorted({c.uri for c in copies})))


class _PickFn(beam.DoFn):
    def __init__(self):
        self.unique = Metrics.counter(NAMESPACE, "unique_objects")
        self.duplicates = Metrics.counter(NAMESPACE, "duplicate_objects")

    def process(self, element):
        _, copies = element
        copies = list(copies)
        self.unique.inc()
        self.duplicates.inc(len(copies) - 1)
        yield pick_representative(copies)


class DedupeByContent(beam.PTransform):
    """PCollection[RawObject] -> PCollection[UniqueObject]."""

    def expand(self, raws):
        return (raws
                | "KeyByContentHash" >> beam.Map(lambda r: (r.content_hash, r))
                | "GroupByContentHash" >> beam.GroupByKey()
                | "PickRepresentative" >> beam.ParDo(_PickFn()).with_output_types(UniqueObject))
