"""The answer stage in Beam: a shard of questions -> its answer records, in batches.

The engine (DuckDB read-only, matrices, models) is built once per worker in setup();
a failing batch is answered again question by question, so one bad question fails alone.

Example:
    answered = shards | "AnswerShard" >> beam.ParDo(AnswerShardFn(version_dir, cfg, spec))
"""
from __future__ import annotations

import apache_beam as beam

from transforms.common.counters import counter
from transforms.ingest.embed import ModelSpec
from transforms.query.engine import QAEngine
from transforms.query.records import AnswerRecord, InputError, Question


class AnswerShardFn(beam.DoFn):
    """(shard, questions) -> the shard's output records, answered in batches (answer_in_order
    streams them, for a stage that writes as it answers).

    The engine (DuckDB read-only, matrices, models) is built once per worker.
    """

    def __init__(self, version_dir: str, cfg, spec: ModelSpec, progress_every_s: float = 0.0,
                 trace: bool = False, manifest: dict = None):
        self.version_dir, self.cfg, self.spec = version_dir, cfg, spec
        self.manifest = manifest  # the driver's: workers never read the manifest again
        self.trace = trace
        self.progress_every_s = progress_every_s
        self.answered = counter("answered")
        self.not_found = counter("not_found")
        self.unsupported = counter("unsupported")
        self.errors = counter("answer_errors")
        self.invalid = counter("invalid_citations_removed")
        self.rewrite_failed = counter("rewrite_failed")  # questions left with their own vector

    def setup(self):
        import time
        self.engine = QAEngine(self.version_dir, self.cfg, self.spec, manifest=self.manifest)
        self._t0 = self._last = time.monotonic()
        self._done = 0

    def teardown(self):
        if getattr(self, "engine", None):
            self.engine.close()

    def process(self, element):
        shard, records = element
        yield shard, list(self.answer_in_order(records))

    def answer_in_order(self, records):
        """The shard's output records in input order (records come sorted by line), answered in
        batches of output.batch_size and yielded batch by batch: a caller that writes them as
        they come holds one batch, never the shard's answers."""
        bs = self.cfg.output.batch_size
        batch: list[Question] = []
        pending: list = []  # the batch's questions and the other records between them, in order
        for r in records:
            pending.append(r)
            if isinstance(r, Question):
                batch.append(r)
            if len(batch) >= bs or len(pending) >= 4 * bs:
                yield from self._flush(batch, pending)
                batch, pending = [], []
        yield from self._flush(batch, pending)

    def _flush(self, batch: list[Question], pending: list):
        import time
        answered = iter(self._answer_batch(batch) if batch else [])
        for r in pending:
            if isinstance(r, Question):
                rec = next(answered)
                {"answered": self.answered, "not_found": self.not_found,
                 "unsupported": self.unsupported}.get(rec.status, self.errors).inc()
                self.invalid.inc(rec.invalid_citations or 0)
            elif isinstance(r, InputError):  # unreadable input lines go to the output with their reason
                self.errors.inc()
                rec = AnswerRecord.from_input_error(r)
            elif isinstance(r, AnswerRecord):  # already decided upstream (e.g. a repeated id)
                self.errors.inc()
                rec = r
            else:
                continue
            yield rec
        if batch:
            self._done += len(batch)
            now = time.monotonic()
            if self.progress_every_s and now - self._last >= self.progress_every_s:
                self._last = now
                print(f"  answered {self._done} questions ({self._done / (now - self._t0):.1f}/s)", flush=True)

    def _answer_batch(self, batch: list[Question]) -> list[AnswerRecord]:
        failed_before = self.engine.rewrite_failed
        try:
            out = self.engine.answer_batch(batch, self.cfg.output.retrieved_top_k, trace=self.trace)
        except Exception:  # a failing batch: each question again alone, so one bad one fails alone
            failed_before = self.engine.rewrite_failed  # its questions are rewritten again: count them once
            out = [self._answer_alone(q) for q in batch]
        self.rewrite_failed.inc(self.engine.rewrite_failed - failed_before)
        return out

    def _answer_alone(self, q: Question) -> AnswerRecord:
        from transforms.common.redact import redact_text
        try:
            return self.engine.answer_batch([q], self.cfg.output.retrieved_top_k, trace=self.trace)[0]
        except Exception as e:
            return AnswerRecord.failed(q.id, q.question, redact_text(f"{type(e).__name__}: {e}"), q.line)
