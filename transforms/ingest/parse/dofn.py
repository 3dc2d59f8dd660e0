"""The Beam wrapper of the parse stage: UniqueObject -> Documents, or a dead letter."""
from __future__ import annotations

import dataclasses

import apache_beam as beam
from apache_beam.metrics import Metrics

from transforms.common import progress
from transforms.records import DeadLetter, UniqueObject

from transforms.common.counters import DEAD_LETTER, NAMESPACE  # noqa: E402


class ParseFn(beam.DoFn):
    """Emits Documents; unparseable objects (and bad JSONL lines) go to DEAD_LETTER with the reason."""

    def __init__(self, acl_rules: tuple[tuple[str, tuple[str, ...]], ...] = (), acl_root=None):
        self.acl_rules = acl_rules  # (key prefix, groups): what a path allows (transforms.ingest.acl)
        self.acl_root = acl_root
        self.parsed = Metrics.counter(NAMESPACE, "parsed_objects")
        self.documents = Metrics.counter(NAMESPACE, "documents")
        self.failed = Metrics.counter(NAMESPACE, "dead_lettered_parse")
        self.bad_lines = Metrics.counter(NAMESPACE, "dead_lettered_lines")

    def _acl_for(self, key: str) -> list[str]:
        groups: list[str] = []
        for prefix, rule_groups in self.acl_rules:
            if key.startswith(prefix):
                groups.extend(g for g in rule_groups if g not in groups)
        return groups

    def process(self, unique: UniqueObject):
        from transforms.ingest.parse import ParseError, parse_object_with_errors

        raw = unique.raw
        try:
            docs, line_errors = parse_object_with_errors(raw, list(unique.source_uris))
        except ParseError as e:
            self.failed.inc()
            yield beam.pvalue.TaggedOutput(DEAD_LETTER, DeadLetter(raw.uri, raw.content_hash, "parse", str(e)))
            return
        except Exception as e:  # a parser bug must not stop the job: record it and go on
            self.failed.inc()
            yield beam.pvalue.TaggedOutput(
                DEAD_LETTER, DeadLetter(raw.uri, raw.content_hash, "parse", f"{type(e).__name__}: {e}"))
            return
        self.parsed.inc()
        progress.note("documents parsed")
        for reason in line_errors:
            self.bad_lines.inc()
            yield beam.pvalue.TaggedOutput(DEAD_LETTER, DeadLetter(raw.uri, raw.content_hash, "parse", reason))
        from transforms.ingest.acl import effective_acl, path_groups
        allowed = path_groups(raw.uri, raw.key, self.acl_rules, self.acl_root)
        for doc in docs:
            doc = dataclasses.replace(doc, source_hash=raw.content_hash)
            doc = dataclasses.replace(doc, acl=effective_acl(allowed, doc.acl))  # a record only narrows
            self.documents.inc()
            yield doc
