"""The answer job: a question file -> one grounded, cited answer per question.

Questions are spread over shards by a hash of their id. Each shard is answered
as one unit and written atomically (temp file + rename) under
`<output>.parts/`; a rerun skips shards already written, so a crash costs at
most the shards in flight and no question is ever written twice. When every
shard is there, they are joined into `<output>` (again temp + rename).

Index, questions and output may be local paths or s3:// URIs. An index of one segment is
searched and answered in one step per shard; over several segments the search scatters
(shard x segment) and gathers per shard (transforms/query/scatter_gather.py). From an index on
object storage each host answers from a local copy of each segment, fetched once by segment id
and verified against its sha256s (transforms/index/segment_store.py); on object storage a shard
and the joined output are each one PUT (or one multipart upload), which is all-or-nothing like
the local rename.
"""
from __future__ import annotations

import glob
import hashlib
import json
import os
import time
from typing import Optional

import apache_beam as beam

from transforms.common import storage
from transforms.common.fault_injection import kill_point
from transforms.common.s3 import is_s3

from configs.schema import Config
from pipelines.options import pipeline_options
from transforms.ingest.embed import model_spec_from_config
from transforms.query.answer_stage import AnswerShardFn
from transforms.query.questions.pieces import plan_pieces, read_piece, shards_for
from transforms.query.records import AnswerRecord, Question
from transforms.query.shard_writer import ShardWriter


def shard_of(key: str, shards: int) -> int:
    return int(hashlib.sha256(key.encode("utf-8")).hexdigest()[:12], 16) % shards


def part_path(parts_dir: str, shard: int, shards: int, fmt: str) -> str:
    return storage.join(parts_dir, f"shard-{shard:05d}-of-{shards:05d}.{fmt}")


def retry_marker(part: str) -> str:
    """Beside a part whose records include backend errors: a rerun answers that shard again."""
    return part + ".retry"


def _key(rec) -> int:
    return rec.line


def order_and_dedupe(records: list) -> list:
    """Input order, and one answer per id: a repeated id becomes an error record."""
    seen: dict[str, int] = {}
    out = []
    for rec in sorted(records, key=_key):
        if isinstance(rec, Question):
            if rec.id in seen:
                out.append(AnswerRecord.failed(rec.id, rec.question,
                                               f"line {rec.line}: duplicate id (first at line {seen[rec.id]})",
                                               rec.line))
                continue
            seen[rec.id] = rec.line
        out.append(rec)
    return out


def write_part(path: str, records: list[dict], fmt: str) -> None:
    """A whole shard at once (the answer stage streams through ShardWriter itself)."""
    with ShardWriter(path, fmt, with_trace=any("trace" in r for r in records)) as w:
        for r in records:
            w.write(r)


class AnswerShardToPartFn(beam.DoFn):
    """(shard, records) -> the shard's part file, answered and written batch by batch: a worker
    holds one batch of answers, not a shard's, and the part appears whole or not at all."""

    def __init__(self, answer_fn, parts_dir: str, shards: int, fmt: str, trace: bool = False):
        self.answer_fn, self.parts_dir, self.shards, self.fmt = answer_fn, parts_dir, shards, fmt
        self.trace = trace

    def setup(self):
        self.answer_fn.setup()

    def teardown(self):
        self.answer_fn.teardown()

    def process(self, element):
        shard, payload = element
        if isinstance(payload, dict):  # scattered over segments: the shard's questions and every segment's hits
            (records, questions), = payload["questions"]
            stream = self.answer_fn.with_hits(records, questions, list(payload["hits"]))
        else:
            stream = self.answer_fn.answer_in_order(payload)
        path = part_path(self.parts_dir, shard, self.shards, self.fmt)
        marker, retry = retry_marker(path), False
        with ShardWriter(path, self.fmt, with_trace=self.trace) as w:
            for rec in stream:
                w.write(rec.to_row())
                if rec.retryable and not retry:  # before the part is complete: a crash leaves no doubt
                    storage.write_text(marker, "backend errors in this shard: a rerun answers it again\n")
                    retry = True
        if not retry and storage.exists(marker):  # after the new part: until then the old one needs redoing
            storage.delete(marker)
        self._written = getattr(self, "_written", 0) + 1
        kill_point(f"after_shard:{self._written}")  # tests: a real crash between two shard writes
        yield w.count


def list_parts(parts_dir: str, shards: int, fmt: str) -> list[str]:
    if is_s3(parts_dir):
        return [u for u in storage.list_files(parts_dir, suffix=f"-of-{shards:05d}.{fmt}")
                if u.rsplit("/", 1)[-1].startswith("shard-")]
    return sorted(glob.glob(os.path.join(parts_dir, f"shard-*-of-{shards:05d}.{fmt}")))


def _retrying(parts_dir: str, shards: int, fmt: str) -> set[str]:
    """The parts marked for a rerun (retry_marker), from one listing of the parts dir."""
    return {m[:-len(".retry")] for m in list_parts(parts_dir, shards, fmt + ".retry")}


def join_parts(parts_dir: str, output: str, fmt: str, shards: int):
    """Join the shards into `output` (atomically) one shard at a time, counting their records'
    statuses on the way: (records written, StatusCounts.counts). Memory follows one shard."""
    from transforms.query.output_stats import StatusCounts
    counts = StatusCounts()
    if is_s3(output):  # the parts copied down once, joined into a local file, then one upload
        import tempfile
        with tempfile.TemporaryDirectory(prefix="ragbeam-join-") as d:
            local_parts = os.path.join(d, "parts")
            storage.download_tree(parts_dir, local_parts)
            local = os.path.join(d, os.path.basename(output))
            n, whole = join_parts(local_parts, local, fmt, shards)
            storage.upload_file(local, output)
        return n, whole
    parts = list_parts(parts_dir, shards, fmt)
    tmp = output + ".tmp"
    n = 0
    if fmt == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq
        # one schema for every shard first (a shard whose error column is all null has it typed
        # null), then one shard at a time through a single writer
        schemas = [pq.read_schema(p) for p in parts]
        schema = pa.unify_schemas(schemas, promote_options="permissive") if schemas else pa.schema([])
        with pq.ParquetWriter(tmp, schema, compression="zstd") as writer:
            for p in parts:
                t = pq.read_table(p)
                if t.num_rows:  # missing or null-typed columns take the unified type
                    t = pa.concat_tables([schema.empty_table(), t], promote_options="permissive")
                    writer.write_table(t.select(schema.names).cast(schema))
                    counts.add_table(t)
                    n += t.num_rows
    else:
        with open(tmp, "wb") as out:
            for p in parts:
                with open(p, "rb") as f:
                    data = f.read()  # one shard: questions_per_shard answers
                out.write(data)
                n += counts.add_jsonl(data)
    os.replace(tmp, output)
    return n, counts.counts


def run_fingerprint(cfg: Config, version_dir: str, qfile) -> dict:
    """What must be equal for written shards to be reused by a resumed run (qfile: the
    QuestionFile the check returned)."""
    settings = cfg.model_dump(mode="json", include={"retrieve", "rerank", "answer", "questions", "output",
                                                    "embed", "rewrite"})
    for where in ("api_key", "base_url", "concurrency", "timeout_s", "retries", "backoff_s", "budget_s"):
        settings["answer"].pop(where, None)  # how and where the backend is reached, not what answers
    if cfg.rewrite.kind != "none":
        settings["rewrite"]["llm_model"] = cfg.llm.model  # which model rewrote the questions
    # the values in force: what the config leaves unset is the profile's fit, which a release may refit
    settings["retrieve"].update(fusion_alpha=cfg.fusion_alpha, fusion_alpha_min=cfg.fusion_alpha_min,
                                fusion_norm=cfg.fusion_norm)
    # the fitted model file: the selection's, or (answer.selection: rules) the one that gives the
    # rules' answers their confidence; a refit changes the confidences of the answers it writes
    fitted = cfg.answer_model if cfg.answer_model is not None else cfg.confidence_model
    settings["answer"].update(threshold=cfg.evidence_threshold, lexical_weight=cfg.lexical_weight,
                              evidence_model=cfg.evidence_model, max_sentences=cfg.max_sentences,
                              answer_model=fitted.digest if fitted is not None else None)
    return {**qfile.version(), "index_version": version_dir.rstrip("/").rsplit("/", 1)[-1],
            "settings": hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]}


def prepare_parts_dir(parts_dir: str, fingerprint: dict) -> None:
    """Reuse shards only from an interrupted run of the same job; anything else starts afresh."""
    import shutil
    marker = storage.join(parts_dir, "_run.json")
    try:
        same = json.loads(storage.read_text(marker)) == fingerprint if storage.exists(marker) else False
    except (FileNotFoundError, ValueError):
        same = False
    if not same:
        if is_s3(parts_dir):
            storage.delete_tree(parts_dir)
            storage.write_text(marker, json.dumps(fingerprint))
            return
        shutil.rmtree(parts_dir, ignore_errors=True)
        os.makedirs(parts_dir)
        with open(marker, "w", encoding="utf-8") as f:
            json.dump(fingerprint, f)


def worker_config(cfg: Config) -> Config:
    """The config the workers get (it is pickled into the job graph): without S3 keys, which the
    workers resolve from their own environment or instance role."""
    return cfg.model_copy(update={"s3": cfg.s3.model_copy(update={"access_key_id": None,
                                                                  "secret_access_key": None})})


def _workers_on_this_host(cfg: Config, beam_args: Optional[list[str]]) -> bool:
    """The in-process runners share this host's segment cache, so the driver may fill it."""
    local = cfg.runner.name in ("DirectRunner", "FnApiRunner")
    return local and not any(a.startswith("--runner") for a in beam_args or [])


def run_answer(cfg: Config, index: str, questions: str, output: str, *, progress: bool = True,
               beam_args: Optional[list[str]] = None, log=print, overwrite: bool = False,
               trace: bool = False) -> dict:
    """One run per output at a time (an exclusive lock on `<output>.lock`); a finished output
    of a different job is refused unless `overwrite`; the question file is checked whole first."""
    from transforms.common.lock import exclusive_lock
    from transforms.common.s3 import settings_from_config as s3_settings
    from transforms.query.output_guard import refuse_output_over_inputs
    from transforms.query.questions.file import inspect_question_file

    refuse_output_over_inputs(output, questions, index)  # before the lock file is made beside it
    # whole-file problems before any pipeline; the one look at the file that the rest shares
    qfile = inspect_question_file(questions, s3_settings(cfg))
    with exclusive_lock(output + ".lock", output):
        return _run_answer(cfg, index, qfile, output, progress=progress, beam_args=beam_args, log=log,
                           overwrite=overwrite, trace=trace)


def _run_answer(cfg: Config, index: str, qfile, output: str, *, progress: bool,
                beam_args: Optional[list[str]], log, overwrite: bool, trace: bool) -> dict:
    from transforms.common.s3 import settings_from_config as s3_settings

    started = time.monotonic()
    from transforms.common.s3 import export_to_environment
    export_to_environment(s3_settings(cfg))  # workers resolve keys, the graph holds none
    from transforms.index.publish import pin_current
    # the version is pinned (a lease the pruner honours) before its manifest is read, and that
    # manifest is the only one the job reads: a nightly publishing and pruning meanwhile changes nothing
    version_dir, lease = pin_current(index)
    try:
        return _answer_version(cfg, version_dir, qfile, output, progress=progress, beam_args=beam_args, log=log,
                               overwrite=overwrite, trace=trace, started=started)
    finally:
        if lease is not None:
            lease.release()


def _answer_version(cfg: Config, version_dir: str, qfile, output: str, *, progress: bool,
                    beam_args: Optional[list[str]], log, overwrite: bool, trace: bool, started: float) -> dict:
    from transforms.common.counters import read_counters as counters
    from transforms.common.s3 import settings_from_config as s3_settings
    from transforms.index.publish import read_manifest
    from transforms.query.output_stats import refuse_foreign_output

    questions = qfile.uri
    spec = model_spec_from_config(cfg)
    from transforms.query.engine import check_model
    from transforms.query.version_segments import VersionSegments
    manifest = read_manifest(version_dir)  # a cut one: one line naming it
    check_model(manifest, spec)  # refuse before any work, not in every worker
    segments = VersionSegments(version_dir, manifest)  # a version from before segments: one line here
    n_segments = len(segments)
    if not is_s3(version_dir) or _workers_on_this_host(cfg, beam_args):
        # every segment checked against its segment.json before any work (hashed once per host,
        # a stat per file after that): a corrupt, cut or unknown-format segment is one line here
        for i in range(n_segments):
            segments.segment(i)
            segments.release(i)
    wire_manifest = {k: v for k, v in manifest.items() if k != "config"}  # what the workers read of it
    s3 = s3_settings(cfg)
    # byte ranges / row groups, read inside the pipeline
    pieces, n_lines = plan_pieces(qfile, s3, max_line_bytes=cfg.questions.max_line_bytes)
    shards, fmt = shards_for(n_lines, cfg.output.questions_per_shard, cfg.output.shards), cfg.output.format
    parts_dir = output + ".parts"
    fingerprint = run_fingerprint(cfg, version_dir, qfile)
    refuse_foreign_output(output, parts_dir, fingerprint, overwrite)
    prepare_parts_dir(parts_dir, fingerprint)
    written = set(list_parts(parts_dir, shards, fmt))
    written -= _retrying(parts_dir, shards, fmt)  # a part with backend errors is answered again
    done = {s for s in range(shards) if part_path(parts_dir, s, shards, fmt) in written}
    log(f"ragbeam answer: {questions} against {version_dir} "
        f"({len(done)}/{shards} shards already written)")

    def keyed(rec):
        if isinstance(rec, Question):
            return shard_of(rec.id, shards), rec.to_wire()
        return shard_of(f"line:{rec.line}", shards), rec

    wcfg, every_s = worker_config(cfg), 5.0 if progress else 0.0
    with beam.Pipeline(options=pipeline_options(cfg, beam_args)) as p:
        by_shard = (p
                    | "QuestionPieces" >> beam.Create(pieces)
                    | "SpreadPieces" >> beam.Reshuffle()
                    | "ReadQuestions" >> beam.FlatMap(lambda piece: read_piece(piece, s3=s3))
                    | "KeyByShard" >> beam.Map(keyed)
                    | "SkipWrittenShards" >> beam.Filter(lambda kv: kv[0] not in done)
                    | "GroupByShard" >> beam.GroupByKey()
                    | "OrderAndDedupe" >> beam.MapTuple(lambda s, recs: (s, order_and_dedupe(
                        [Question.from_wire(r) if isinstance(r, tuple) else r for r in recs]))))
        if n_segments == 1:  # one segment: search and answer in one step
            answer_fn = AnswerShardFn(version_dir, wcfg, spec, progress_every_s=every_s, trace=trace,
                                      manifest=wire_manifest)
            to_answer = by_shard
        else:  # scatter (shard x segment), gather per shard (transforms/query/scatter_gather.py)
            from transforms.query.scatter_gather import (EmbedQuestionsFn, GatheredAnswerFn, MergeShardHits,
                                                         SearchSegmentFn, scatter)
            embedded = by_shard | "EmbedQuestions" >> beam.ParDo(EmbedQuestionsFn(wcfg, spec))
            hits = (embedded
                    | "ScatterToSegments" >> beam.FlatMap(scatter, n_segments)
                    | "GroupBySegment" >> beam.GroupByKey()
                    | "SearchSegment" >> beam.ParDo(SearchSegmentFn(version_dir, wcfg, wire_manifest))
                    | "MergeHits" >> beam.CombinePerKey(MergeShardHits(cfg.retrieve.dense_top_n,
                                                                       cfg.retrieve.bm25_top_n)))
            to_answer = ({"questions": embedded, "hits": hits} | "GatherHits" >> beam.CoGroupByKey())
            answer_fn = GatheredAnswerFn(version_dir, wcfg, spec, progress_every_s=every_s, trace=trace,
                                         manifest=wire_manifest)
        to_answer | "AnswerAndWriteShard" >> beam.ParDo(AnswerShardToPartFn(answer_fn, parts_dir, shards, fmt,
                                                                            trace=trace))
    stats = counters(p.result)
    n, whole = join_parts(parts_dir, output, fmt, shards)  # every shard, also an earlier run's
    summary = {"questions_written": n, "answered": whole["answered"],
               "not_found": whole["not_found"], "unsupported": whole["unsupported"], "errors": whole["error"],
               "invalid_citations_removed": whole["invalid_citations"],
               "answered_this_run": stats.get("answered", 0) + stats.get("not_found", 0)
               + stats.get("answer_errors", 0),
               "shards_skipped": len(done), "shards": shards,
               "shards_to_retry": len(_retrying(parts_dir, shards, fmt)),
               "wall_s": round(time.monotonic() - started, 2),
               "index_version": version_dir.rstrip("/").rsplit("/", 1)[-1]}
    if "confidence_bands" in whole:  # answered records per band of their calibrated confidence
        summary["confidence_bands"] = whole["confidence_bands"]
    if cfg.rewrite.kind != "none":  # of this run's questions: those whose rewriting failed kept their own vector
        summary["rewrite_failed"] = stats.get("rewrite_failed", 0)
    if is_s3(output):
        storage.write_json(output + ".summary.json", summary)
    else:
        with open(output + ".summary.json", "w", encoding="utf-8") as f:
            json.dump(summary, f, indent=2)
    return summary
