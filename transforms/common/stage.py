"""The one Beam stage pattern of the index side: a pure stage function, one generic DoFn.

Every stage is a plain function that unit tests call directly, with no Beam in it:

    read_source(listed, client, max_bytes)   ListedObject -> RawObject       (ingest/read.py)
    parse_unique(unique, acl_rules)          UniqueObject -> Parsed           (ingest/parse)
    chunk_document(doc, tokenizer, settings) Document -> list[Chunk]          (ingest/chunk.py)
    contextualize(chunks, ctx, tok, n)       list[Chunk] -> list[Chunk]       (ingest/contextualize.py)
    embed_chunks(chunks, embedder, cache)    list[Chunk] -> Embedded          (ingest/embed.py)
    choose_representative(...) / merge_documents(...)                         (ingest/dedupe.py)

`StageFn` is the only DoFn shape around them. A subclass names its stage and its
failure counter, loads what is heavy in `setup()` (once per DoFn instance) and
implements `apply(element, out)`: call the stage function and put the results on
`out` (main output, tagged outputs, counters, progress). `StageFn.process` runs
`apply` in try/except and commits per element, all or nothing: on success the
buffered counters are incremented and the outputs emitted; on failure none of them
are, the stage's failure counter goes up by one and the element goes to the
DEAD_LETTER output as `DeadLetter(uri, content_hash, stage, reason)`, so one bad
input never stops the run and is always accounted for.

The composite transforms built on these (`ReadSource`, `ParseObjects`,
`ChunkDocuments`, `Contextualize`, `EmbedChunks`, `DedupeByContent`,
`DedupeDocuments`) are typed and label their steps; each docstring has an example.

Beam-model rules kept here for every runner: nothing is emitted from
`finish_bundle` (so no output ever needs a window of its own), and no mutable state
is shared between DoFn instances except through `apache_beam.utils.shared`
(the progress tally: transforms/common/progress.py). Counter names are fixed per stage: the
run summary reconciles them (transforms/index/manifest.py:reconcile).
"""
from __future__ import annotations

from typing import Any, Iterator, Optional

import apache_beam as beam
from apache_beam.metrics import Metrics

from transforms.common import progress
from transforms.common.counters import DEAD_LETTER, NAMESPACE
from transforms.records import DeadLetter


class Outputs:
    """What one element produced, held until the element succeeds.

    Stage code calls `emit` (main output), `tagged` (a named side output), `count`
    (a Beam counter in the ragbeam namespace), `dead_letter` (a partial failure that
    does not fail the element, e.g. one bad JSONL line) and `progress`. Tests can
    use it directly: `out = Outputs(); fn.apply(x, out); out.main`.
    """

    def __init__(self, stage: str = "", origin: tuple[str, str] = ("", "")):
        self.stage, self.origin = stage, origin
        self.items: list[Any] = []  # main values and TaggedOutputs, in emission order
        self.counts: dict[str, int] = {}
        self.progress: list[tuple[str, int]] = []

    def emit(self, value: Any) -> None:
        self.items.append(value)

    def tagged(self, tag: str, value: Any) -> None:
        self.items.append(beam.pvalue.TaggedOutput(tag, value))

    def count(self, name: str, n: int = 1) -> None:
        self.counts[name] = self.counts.get(name, 0) + n

    def dead_letter(self, reason: str) -> None:
        uri, content_hash = self.origin
        self.tagged(DEAD_LETTER, DeadLetter(uri, content_hash, self.stage, reason))

    def note_progress(self, kind: str, n: int = 1) -> None:
        self.progress.append((kind, n))

    @property
    def main(self) -> list[Any]:
        return [v for v in self.items if not isinstance(v, beam.pvalue.TaggedOutput)]

    def of(self, tag: str) -> list[Any]:
        return [v.value for v in self.items if isinstance(v, beam.pvalue.TaggedOutput) and v.tag == tag]


class StageFn(beam.DoFn):
    """The generic wrapper: one stage function, try/except -> dead letter, counters, progress.

    Subclass attributes:
      STAGE         the dead-letter stage name (read | parse | chunk | embed | ...)
      FAILED        the counter a dead-lettered element increments (None: failures are
                    the pipeline's own bugs and propagate, e.g. dedupe)
      progress_every_s  print a progress line at most this often (0: never; local runs)

    Example (the chunk stage, transforms/ingest/chunk.py):

        class ChunkFn(StageFn):
            STAGE, FAILED = "chunk", "dead_lettered_chunk"

            def setup(self):
                self.tokenizer = load_tokenizer(self.tokenizer_path)

            def apply(self, doc, out):
                chunks = chunk_document(doc, self.tokenizer, self.settings)  # the pure function
                out.count("chunks", len(chunks))
                out.tagged(DOCUMENTS, document_row(doc, len(chunks)))
                if chunks:
                    out.emit(chunks)
    """
    STAGE: str = ""
    FAILED: Optional[str] = None
    progress_every_s: float = 0.0

    def apply(self, element, out: Outputs) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def origin(self, element) -> tuple[str, str]:
        """(source uri, content hash) of an element, for its dead letter."""
        return (getattr(element, "source_uri", None) or getattr(element, "uri", ""),
                getattr(element, "content_hash", ""))

    def reason(self, error: Exception) -> str:
        from transforms.common.redact import redact_text
        return redact_text(f"{type(error).__name__}: {error}")  # a dead letter never holds a secret

    def on_failure(self, element, reason: str) -> None:
        """Hook for logging; the dead letter itself is emitted by process()."""

    def process(self, element) -> Iterator[Any]:
        out = Outputs(self.STAGE, self.origin(element))
        if self.FAILED is None:
            self.apply(element, out)
        else:
            try:
                self.apply(element, out)
            except Exception as e:  # this element's failure, not the run's
                reason = self.reason(e)
                self.on_failure(element, reason)
                Metrics.counter(NAMESPACE, self.FAILED).inc()
                uri, content_hash = out.origin
                yield beam.pvalue.TaggedOutput(DEAD_LETTER, DeadLetter(uri, content_hash, self.STAGE, reason))
                return
        for name, n in out.counts.items():
            Metrics.counter(NAMESPACE, name).inc(n)
        if out.progress:
            self._note_progress(out.progress)
        yield from out.items

    def _note_progress(self, notes: list[tuple[str, int]]) -> None:
        tally = getattr(self, "_tally", None)
        if tally is None:  # acquired lazily: subclasses own setup(); kept so Shared keeps it alive
            tally = self._tally = progress.tally()
        for kind, n in notes:
            tally.note(kind, n)
        if tally.due(self.progress_every_s):
            print(tally.line(), flush=True)
