"""The index job: storage -> dedupe -> parse -> chunk -> contextualize -> embed -> Parquet -> DuckDB.

The driver lists the source, runs one Beam pipeline that writes the shards of a
new version into a staging dir, builds the DuckDB artifact from those shards,
writes the manifest and summary, and only then publishes the version by
switching the CURRENT pointer. A failure anywhere leaves the live version as it was.
"""
from __future__ import annotations

import datetime
import os
import time
from dataclasses import dataclass, field
from typing import Optional

import apache_beam as beam

from configs.schema import Config
from pipelines.options import pipeline_options
from transforms import publish
from transforms.chunk import DOCUMENTS, ChunkFn, ChunkSettings
from transforms.contextualize import ContextualizeFn
from transforms.dedupe import DedupeByContent
from transforms.embed import EmbedChunksFn, ModelSpec, model_spec_from_config
from transforms.parse.dofn import DEAD_LETTER, ParseFn
from transforms.read import ListedObject, ReadObjectsFn, S3Settings, list_objects
from transforms.records import (CHUNK_SCHEMA, DEAD_LETTER_SCHEMA, DOCUMENT_SCHEMA, Chunk, DeadLetter,
                                RawObject, UniqueObject, dead_letter_row)
from transforms.shards import CHUNKS_DIR, DEAD_LETTERS_DIR, DOCUMENTS_DIR, WriteShards

PIPELINE_VERSION = "1"


def s3_settings(cfg: Config) -> S3Settings:
    return S3Settings(endpoint_url=cfg.s3.endpoint_url or None, region=cfg.s3.region,
                      access_key_id=cfg.s3.access_key_id, secret_access_key=cfg.s3.secret_access_key)


def chunk_settings(cfg: Config, spec: ModelSpec) -> ChunkSettings:
    return ChunkSettings(model_max_tokens=spec.max_length, chunk_tokens=cfg.chunk.chunk_tokens,
                         overlap_tokens=cfg.chunk.overlap_tokens, context_tokens=cfg.chunk.context_tokens)


@dataclass
class IndexPlan:
    """What this run reads and processes (the incremental planner fills `carried`)."""
    listed: list[ListedObject]
    to_process: list[ListedObject]
    carried: dict = field(default_factory=dict)


def build_index_pipeline(p: beam.Pipeline, to_process: list[ListedObject], out_dir: str, cfg: Config,
                         spec: ModelSpec, indexed_at: datetime.datetime, progress: bool = False) -> None:
    """The Beam graph. Every step has a stable label (runners key state and metrics on them)."""
    settings = chunk_settings(cfg, spec)
    acl_rules = tuple((r.prefix, tuple(r.groups)) for r in cfg.acl)

    listed = (p | "ListSource" >> beam.Create(to_process).with_output_types(ListedObject)
                | "SpreadReads" >> beam.Reshuffle())
    read = listed | "Read" >> beam.ParDo(ReadObjectsFn(s3_settings(cfg))).with_outputs(
        DEAD_LETTER, main="objects")
    raws = read.objects
    uniques = raws | "DedupeByContent" >> DedupeByContent()
    parsed = uniques | "Parse" >> beam.ParDo(ParseFn(acl_rules)).with_outputs(DEAD_LETTER, main="documents")
    chunked = parsed.documents | "Chunk" >> beam.ParDo(
        ChunkFn(settings, spec.tokenizer_path)).with_outputs(DOCUMENTS, DEAD_LETTER, main="chunks")
    chunks = chunked.chunks | "Contextualize" >> beam.ParDo(
        ContextualizeFn(cfg.contextualize.kind, settings.context_tokens, spec.tokenizer_path)
    ).with_output_types(Chunk)
    rows = (chunks
            | "BatchForEmbedding" >> beam.BatchElements(min_batch_size=cfg.embed.batch_size,
                                                        max_batch_size=cfg.embed.batch_size * 8)
            | "Embed" >> beam.ParDo(EmbedChunksFn(spec, cfg.embed.batch_size, indexed_at,
                                                  progress_every_s=5.0 if progress else 0.0))
            .with_output_types(dict))
    rows | "WriteChunks" >> WriteShards(os.path.join(out_dir, CHUNKS_DIR), CHUNK_SCHEMA)
    chunked[DOCUMENTS] | "WriteDocuments" >> WriteShards(os.path.join(out_dir, DOCUMENTS_DIR), DOCUMENT_SCHEMA)
    ((read[DEAD_LETTER], parsed[DEAD_LETTER], chunked[DEAD_LETTER])
     | "FlattenDeadLetters" >> beam.Flatten()
     | "DeadLetterRows" >> beam.Map(dead_letter_row).with_output_types(dict)
     | "WriteDeadLetters" >> WriteShards(os.path.join(out_dir, DEAD_LETTERS_DIR), DEAD_LETTER_SCHEMA))


def counters(result) -> dict[str, int]:
    from apache_beam.metrics.metric import MetricsFilter

    out: dict[str, int] = {}
    for c in result.metrics().query(MetricsFilter().with_namespace("ragbeam"))["counters"]:
        out[c.key.metric.name] = out.get(c.key.metric.name, 0) + (c.committed or c.attempted or 0)
    return out


def run_index(cfg: Config, input_uri: str, index_dir: str, *, progress: bool = True,
              beam_args: Optional[list[str]] = None, log=print) -> dict:
    """Index `input_uri` into a new version of `index_dir`; return the run summary."""
    from pipelines.summary import reconcile, write_run_outputs
    from pipelines.build_artifacts import build_version_artifact

    started = time.monotonic()
    spec = model_spec_from_config(cfg)
    log(f"ragbeam index: listing {input_uri}")
    listed = list_objects(input_uri, s3_settings(cfg))
    version = publish.new_version_name()
    publish.clear_staging(index_dir)
    out_dir = publish.staging_dir(index_dir, version)
    os.makedirs(out_dir, exist_ok=True)
    indexed_at = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    log(f"ragbeam index: {len(listed)} objects -> version {version} ({cfg.runner.name})")

    with beam.Pipeline(options=pipeline_options(cfg, beam_args)) as p:
        build_index_pipeline(p, listed, out_dir, cfg, spec, indexed_at, progress=progress)
    result = p.result
    pipeline_s = time.monotonic() - started
    stats = counters(result)

    artifact = build_version_artifact(out_dir, cfg, spec) if cfg.artifacts.build else {}
    summary = reconcile(stats, listed=len(listed))
    summary.update(version=version, input=input_uri, wall_s=round(time.monotonic() - started, 2),
                   pipeline_s=round(pipeline_s, 2), artifact=artifact)
    write_run_outputs(out_dir, cfg, spec, summary, pipeline_version=PIPELINE_VERSION)
    publish.publish(index_dir, version)
    summary["pruned"] = publish.prune(index_dir, cfg.index.keep_versions)
    return summary
