"""The answer job over a segmented index: embed once, search per segment, gather, answer.

  (shard, records) --EmbedQuestions--> (shard, ShardQuestions)     question vectors + analysis
                   --ScatterToSegments--> (segment, shard payload) for every segment
                   --GroupBySegment--> SearchSegment: one worker opens one segment, searches every
                                       shard given to it, releases it   -> (shard, (segment, hits))
  MergeHits (CombinePerKey(shard)) --> per question, the segments' hits folded one at a time
                                       into one top list each (segment_search.merge_hits)
  CoGroupByKey(shard) --> the shard's questions with their merged hits
                   --AnswerAndWriteShard--> gather per question, fuse, rerank, answer, write

A worker's memory follows one segment (the searcher) and one shard's merged hits (about
(dense_top_n + bm25_top_n) numbers per question), neither the corpus nor the number of segments.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import apache_beam as beam
import numpy as np

from transforms.common.counters import counter
from transforms.ingest.embed import ModelSpec
from transforms.query.answer_stage import AnswerShardFn
from transforms.query.records import AnswerRecord, Question


@dataclass
class ShardQuestions:
    """A shard's questions as every segment searches them (in record order)."""
    lines: list[int]
    qvecs: np.ndarray  # float32 unit rows
    terms: list[list[str]]
    words: list[set]
    access: list[tuple]  # (acl groups, filters)


def _questions(records) -> list[Question]:
    return [r for r in records if isinstance(r, Question)]


class EmbedQuestionsFn(beam.DoFn):
    """(shard, records) -> (shard, (records, ShardQuestions)): one model call per batch."""

    def __init__(self, cfg, spec: ModelSpec):
        self.cfg, self.spec = cfg, spec

    def setup(self):
        from transforms.common.duck import connect
        from transforms.index.bm25 import Analyzer
        from transforms.index.segments import BM25_STEMMER
        from transforms.ingest.embed import Embedder
        from transforms.query.rewrite import query_encoder
        self.embedder = Embedder(self.spec)
        self.encoder = query_encoder(self.embedder, self.cfg)
        self.rewrite_failed = counter("rewrite_failed")  # questions left with their own vector
        self.con = connect(":memory:", memory_limit="256MB")
        self.analyzer = Analyzer(self.con, BM25_STEMMER)

    def teardown(self):
        if getattr(self, "con", None):
            self.con.close()

    def process(self, element):
        from transforms.common.words import content_words
        shard, records = element
        qs = _questions(records)
        texts = [q.question for q in qs]
        bs = self.cfg.output.batch_size
        failed_before = self.encoder.rewrite_failed
        vecs = [self.encoder.encode(texts[i:i + bs]) for i in range(0, len(texts), bs)]
        self.rewrite_failed.inc(self.encoder.rewrite_failed - failed_before)
        dim = self.spec.dim
        q = np.concatenate(vecs).astype(np.float32) if vecs else np.zeros((0, dim), np.float32)
        q = q / np.clip(np.linalg.norm(q, axis=1, keepdims=True), 1e-12, None)
        terms = [sorted(set(t)) for t in self.analyzer.analyze(texts)] if texts else []
        yield shard, (records, ShardQuestions([x.line for x in qs], q, terms, [content_words(t) for t in texts],
                                              [(x.acl, x.filters) for x in qs]))


def scatter(element, n_segments: int):
    shard, (_, sq) = element
    for i in range(n_segments):
        yield i, (shard, sq)


class SearchSegmentFn(beam.DoFn):
    """(segment, [(shard, ShardQuestions)]) -> (shard, (segment, [SegmentHits per question])).
    Opens the one segment, searches every shard grouped to it, then lets it go."""

    def __init__(self, version_dir: str, cfg, manifest: Optional[dict] = None):
        self.version_dir, self.cfg = version_dir, cfg
        self.manifest = manifest  # the driver's: workers never read the manifest again
        self.searched = counter("segment_searches")

    def setup(self):
        from transforms.index.publish import read_manifest
        from transforms.query.version_segments import VersionSegments
        self.segments = VersionSegments(self.version_dir, self.manifest or read_manifest(self.version_dir))

    def process(self, element):
        from transforms.query.engine import open_searcher
        i, shards = element
        searcher = open_searcher(self.segments, int(i), self.cfg)
        rc, bs = self.cfg.retrieve, self.cfg.output.batch_size
        try:
            for shard, sq in shards:
                hits = []
                for lo in range(0, len(sq.lines), bs):
                    sl = slice(lo, lo + bs)
                    hits += searcher.search(sq.terms[sl], sq.words[sl], sq.qvecs[sl], rc.dense_top_n, rc.bm25_top_n,
                                            access=sq.access[sl])
                self.searched.inc()
                yield shard, (int(i), hits)
        finally:
            del searcher
            self.segments.release(int(i))


class MergeShardHits(beam.CombineFn):
    """(segment, [SegmentHits per question]) values of one shard -> one merged list per question."""

    def __init__(self, dense_n: int, bm25_n: int):
        self.dense_n, self.bm25_n = dense_n, bm25_n

    def create_accumulator(self):
        return None

    def _merge(self, a, b):
        from transforms.query.segment_search import merge_hits
        if a is None:
            return b
        if b is None:
            return a
        return [merge_hits(x, y, self.dense_n, self.bm25_n) for x, y in zip(a, b)]

    def add_input(self, acc, element):
        return self._merge(acc, element[1])

    def merge_accumulators(self, accs):
        out = None
        for a in accs:
            out = self._merge(out, a)
        return out

    def extract_output(self, acc):
        return (-1, acc or [])  # "every segment", in the (segment, hits) shape the answer step takes


class GatheredAnswerFn(AnswerShardFn):
    """AnswerShardFn whose first stage was done by the segments: each question's hits are
    gathered (segment_search.gather), then fused, reranked and answered by AnswerSide."""

    def setup(self):
        import time
        from transforms.query.engine import AnswerSide
        self.engine = AnswerSide(self.version_dir, self.cfg, self.spec, manifest=self.manifest)
        self._t0 = self._last = time.monotonic()
        self._done = 0
        self._pre: dict = {}

    def with_hits(self, records, sq: ShardQuestions, per_segment: list[tuple[int, list]]):
        """Records of the shard in order, answered from the gathered hits."""
        by_seg = [h for _, h in sorted(per_segment, key=lambda x: x[0])]
        self._pre = {line: (sq.qvecs[j], sq.terms[j], [hits[j] for hits in by_seg])
                     for j, line in enumerate(sq.lines)}
        try:
            yield from self.answer_in_order(records)
        finally:
            self._pre = {}

    def _answer_batch(self, batch: list[Question]) -> list[AnswerRecord]:
        try:
            return self._from_hits(batch)
        except Exception:  # a failing batch: each question again alone, so one bad one fails alone
            return [self._answer_alone(q) for q in batch]

    def _answer_alone(self, q: Question) -> AnswerRecord:
        from transforms.common.redact import redact_text
        try:
            return self._from_hits([q])[0]
        except Exception as e:
            return AnswerRecord.failed(q.id, q.question, redact_text(f"{type(e).__name__}: {e}"), q.line)

    def _from_hits(self, batch: list[Question]) -> list[AnswerRecord]:
        from transforms.query.segment_search import gather
        rc = self.cfg.retrieve
        pre = [self._pre[q.line] for q in batch]
        qvecs = np.stack([p[0] for p in pre])
        gathered = [gather(p[2], p[1], rc.dense_top_n, rc.bm25_top_n, self.engine.num_docs) for p in pre]
        rankings = self.engine.rankings(gathered, qvecs, [p[1] for p in pre])
        return self.engine.finish(batch, qvecs, rankings, self.cfg.output.retrieved_top_k, trace=self.trace)


def version_segment_count(version_dir: str) -> Optional[int]:
    from transforms.index.publish import read_manifest
    m = read_manifest(version_dir)
    return len(m.get("segments") or []) or None
