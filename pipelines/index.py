"""The index job: storage -> dedupe -> parse -> chunk -> contextualize -> embed -> Parquet -> segments.

The driver lists the source, runs one Beam pipeline that writes the shards of a
new version into a staging dir, moves them into the shared shard store (INDEX/shards/, content-
addressed) and lists them with the live version's shards it keeps (deletions recorded, unchanged
shards never rewritten: transforms/index/incremental.py), has a second Beam pipeline
build the new segments on workers (pipelines/segments.py: unchanged segments are reused,
deletions become tombstones), writes the manifest and summary, and only then publishes
the version by switching the CURRENT pointer. A failure anywhere leaves the live version as it was.

The index directory may be a local path or an s3:// prefix. On object storage the
workers write their shards straight into the staging prefix and new segments straight
into INDEX/segments/; the driver mirrors what it plans from into a local scratch dir (never the
live chunk shards), copies the new shards server-side into INDEX/shards/, uploads what it made
(sources, deletions, segment statistics, manifest last) and publishes (CURRENT written last).
The listing never travels in the job graph: the plan is written as files into the
staging prefix and read inside the pipeline.
"""
from __future__ import annotations

import datetime
import json
import os
import time
from typing import Optional

import apache_beam as beam

from configs.schema import Config
from pipelines.options import pipeline_options
from transforms.index import publish
from transforms.ingest.chunk import DOCUMENTS, ChunkDocuments, ChunkSettings
from transforms.ingest.context_cache import CONTEXT_SCHEMA, NEW_CONTEXTS_DIR
from transforms.ingest.context_cache import namespace_dir as context_namespace_dir
from transforms.ingest.contextualize import Contextualize, ContextualizeFn, contextualizer_version, is_llm_version
from transforms.ingest.dedupe import (KEPT_DOCUMENTS, NEAR_DUPLICATES, SIGNATURES, DedupeByContent,
                                      DedupeDocuments, KeepLiveDocuments, NearDedupeDocuments)
from transforms.ingest.embed import EmbedChunks, EmbedChunksFn, ModelSpec, model_spec_from_config
from transforms.ingest.embed_cache import (NEW_ENTRIES_DIR, cache_schema, commit_new_entries, convert_parquet_files,
                                          namespace_dir)
from transforms.index import shard_store
from transforms.index.incremental import (KEPT_DOCUMENTS_DIR, KEPT_DOCUMENTS_SCHEMA, SOURCES_READ_DIR,
                                          Plan as IndexPlan, list_version_shards, load_live,
                                          make_plan, processing_key, write_sources_and_carry)
from transforms.common.counters import DEAD_LETTER, read_counters
from transforms.common.fault_injection import kill_point
from transforms.common import storage
from transforms.common.s3 import export_to_environment, is_s3, settings_from_config
from transforms.ingest.acl import MATCH_VERSION as ACL_MATCH_VERSION
from transforms.ingest.guards import refuse_output_inside_input
from transforms.ingest.parse import ParseObjects
from transforms.ingest.read import ListedObject, ReadSource, list_objects
from transforms.records import (DEAD_LETTER_SCHEMA, DOCUMENT_SCHEMA, SOURCE_SCHEMA, RawObject, chunk_schema,
                                dead_letter_row)
from transforms.index.shards import (CHUNKS_DIR, DEAD_LETTERS_DIR, DOCUMENTS_DIR, NEAR_DUPLICATES_DIR,
                                     SIGNATURES_DIR, WriteShards)
from transforms.ingest.neardup import NEAR_DUPLICATES_SCHEMA, SIGNATURE_SCHEMA

PIPELINE_VERSION = "1"


def chunk_settings(cfg: Config, spec: ModelSpec) -> ChunkSettings:
    # The profile's passage prefix goes before every chunk the model sees: its word pieces
    # come out of the model's input limit, so no chunk is cut.
    prefix_tokens = 0
    if spec.passage_prefix:
        from transforms.model.tokens import count_tokens, load_tokenizer
        prefix_tokens = count_tokens(load_tokenizer(spec.tokenizer_path), [spec.passage_prefix])[0]
    return ChunkSettings(model_max_tokens=spec.max_length - prefix_tokens, chunk_tokens=cfg.chunk.chunk_tokens,
                         overlap_tokens=cfg.chunk.overlap_tokens, context_tokens=cfg.chunk.context_tokens)


def ocr_settings(cfg: Config):
    from transforms.ingest.parse.ocr import OcrSettings
    p = cfg.parse
    return OcrSettings(mode=p.ocr, dpi=p.ocr_dpi, min_confidence=p.ocr_min_confidence)


def parse_limits(cfg: Config):
    from transforms.ingest.parse.limits import ParseLimits
    return ParseLimits(max_text_chars=cfg.parse.max_text_chars,
                       max_inflated_bytes=cfg.parse.max_inflated_bytes)


def near_dup_settings(cfg: Config):
    """The dedupe section as NearDupSettings, or None when near-duplicate detection is off."""
    from transforms.ingest.neardup import NearDupSettings
    d = cfg.dedupe
    if not d.near_duplicates:
        return None
    return NearDupSettings(threshold=d.threshold, shingle_size=d.shingle_size, num_perm=d.num_perm)


def live_signature_files(plan: IndexPlan, index_dir: str) -> list[str]:
    """The live version's signatures shards where the workers can read them (the version on
    object storage, not the driver's mirror)."""
    if plan.live is None:
        return []
    vdir = publish.version_dir(index_dir, os.path.basename(plan.live.version_dir.rstrip("/")))
    listing = shard_store.table_shards(plan.live.version_dir, SIGNATURES_DIR, plan.live.manifest)
    if listing is None:  # a version that keeps its signatures in its own folder
        return storage.list_files(storage.join(vdir, SIGNATURES_DIR), suffix=".parquet")
    return [shard_store.shard_uri(index_dir, SIGNATURES_DIR, e.name) for e in listing.entries]


def live_signature_deletions(plan: IndexPlan, index_dir: str) -> dict[str, tuple[str, str]]:
    """Shard uri -> (the live version's signatures deletions file, shard name) for the listed
    signature shards with deleted rows: the workers leave those rows out."""
    if plan.live is None:
        return {}
    listing = shard_store.table_shards(plan.live.version_dir, SIGNATURES_DIR, plan.live.manifest)
    info = (shard_store.listed_tables(plan.live.manifest) or {}).get(SIGNATURES_DIR) or {}
    if listing is None or not info.get("deletions"):
        return {}
    vdir = publish.version_dir(index_dir, os.path.basename(plan.live.version_dir.rstrip("/")))
    return {shard_store.shard_uri(index_dir, SIGNATURES_DIR, name): (storage.join(vdir, info["deletions"]), name)
            for name in listing.deleted}


def source_row(raw: RawObject) -> dict:
    return {"uri": raw.uri, "key": raw.key, "size": raw.size, "mtime": raw.mtime,
            "content_hash": raw.content_hash, "status": "live", "tombstoned_at": None}


def build_index_pipeline(p: beam.Pipeline, plan: IndexPlan, out_dir: str, cfg: Config, spec: ModelSpec,
                         indexed_at: datetime.datetime, cache_dir: Optional[str], progress: bool = False,
                         live_signatures: Optional[list[str]] = None, context_cache: Optional[str] = None,
                         signature_deletions: Optional[dict] = None) -> None:
    """The Beam graph: one typed composite per stage (transforms/common/stage.py). Every step
    has a stable label (runners key state and metrics on them)."""
    settings = chunk_settings(cfg, spec)
    acl_rules = tuple((r.prefix, tuple(r.groups)) for r in cfg.acl)

    plan_files = write_plan_files(plan.to_read, out_dir)
    listed = (p | "ListSource" >> beam.Create(plan_files).with_output_types(str)
                | "ReadPlan" >> beam.FlatMap(read_plan_file).with_output_types(ListedObject)
                | "SpreadReads" >> beam.Reshuffle())
    read = listed | "Read" >> ReadSource(settings_from_config(cfg), cfg.source.max_object_bytes)
    raws = read.objects
    (raws | "SourceRows" >> beam.Map(source_row).with_output_types(dict)
          | "WriteSourcesRead" >> WriteShards(storage.join(out_dir, SOURCES_READ_DIR), SOURCE_SCHEMA))
    uniques = raws | "DedupeByContent" >> DedupeByContent(plan.extra_copies(), plan.known_rep)
    parsed = uniques | "Parse" >> ParseObjects(acl_rules, cfg.source.root, ocr_settings(cfg),
                                                   parse_limits(cfg))
    documents = parsed.documents | "DedupeDocuments" >> DedupeDocuments()
    if plan.partial:  # files re-read for their near-duplicate members: the rest keeps its live rows
        kept = documents | "KeepLiveDocuments" >> KeepLiveDocuments(plan.partial, plan.keep_documents)
        documents = kept["documents"]
        kept[KEPT_DOCUMENTS] | "WriteKeptDocuments" >> WriteShards(
            storage.join(out_dir, KEPT_DOCUMENTS_DIR), KEPT_DOCUMENTS_SCHEMA)
    near_settings = near_dup_settings(cfg)
    if near_settings is not None:
        near = documents | "NearDedupe" >> NearDedupeDocuments(near_settings, live_signatures, plan.near_exclude,
                                                               plan.near_exclude_docs, signature_deletions)
        documents = near["documents"]
        near[NEAR_DUPLICATES] | "WriteNearDuplicates" >> WriteShards(
            storage.join(out_dir, NEAR_DUPLICATES_DIR), NEAR_DUPLICATES_SCHEMA)
        near[SIGNATURES] | "WriteSignatures" >> WriteShards(storage.join(out_dir, SIGNATURES_DIR), SIGNATURE_SCHEMA)
    chunked = documents | "Chunk" >> ChunkDocuments(settings, spec.tokenizer_path)
    contextualized = chunked.chunks | "Contextualize" >> Contextualize(
        cfg.contextualize.kind, settings.context_tokens, spec.tokenizer_path, cfg.llm, cfg.contextualize,
        context_cache)
    if cfg.contextualize.kind == "llm":
        chunks = contextualized.chunks
        contextualized[ContextualizeFn.NEW_CONTEXTS] | "WriteNewContexts" >> WriteShards(
            storage.join(out_dir, NEW_CONTEXTS_DIR), CONTEXT_SCHEMA)
    else:
        chunks = contextualized
    embedded = chunks | "Embed" >> EmbedChunks(spec, cfg.embed.batch_size, indexed_at, cache_dir,
                                               progress_every_s=5.0 if progress else 0.0)
    embedded.rows | "WriteChunks" >> WriteShards(storage.join(out_dir, CHUNKS_DIR), chunk_schema(spec.dim))
    embedded[EmbedChunksFn.NEW_EMBEDDINGS] | "WriteNewEmbeddings" >> WriteShards(
        storage.join(out_dir, NEW_ENTRIES_DIR), cache_schema(spec.dim))
    chunked[DOCUMENTS] | "WriteDocuments" >> WriteShards(storage.join(out_dir, DOCUMENTS_DIR), DOCUMENT_SCHEMA)
    ((read[DEAD_LETTER], parsed[DEAD_LETTER], chunked[DEAD_LETTER])
     | "FlattenDeadLetters" >> beam.Flatten()
     | "DeadLetterRows" >> beam.Map(dead_letter_row).with_output_types(dict)
     | "WriteDeadLetters" >> WriteShards(storage.join(out_dir, DEAD_LETTERS_DIR), DEAD_LETTER_SCHEMA))


def context_cache_dir(index_dir: str, cfg: Config) -> Optional[str]:
    """Where the llm contextualizer's cache lives (None for the other kinds)."""
    if cfg.contextualize.kind != "llm":
        return None
    return context_namespace_dir(index_dir, contextualizer_version(cfg))


PLAN_DIR = "_plan"
PLAN_LINES_PER_FILE = 500  # objects per plan file: the unit a worker picks up before the reshuffle


def write_plan_files(to_read: list[ListedObject], out_dir: str) -> list[str]:
    """The objects to read, as JSONL files under <staging>/_plan/: the job graph carries only
    their names (runners cap graph size; a listing of millions of keys would not fit)."""
    import dataclasses
    names = []
    for i in range(0, len(to_read), PLAN_LINES_PER_FILE):
        uri = storage.join(out_dir, PLAN_DIR, f"plan-{i // PLAN_LINES_PER_FILE:06d}.jsonl")
        storage.write_text(uri, "".join(json.dumps(dataclasses.asdict(lo)) + "\n"
                                        for lo in to_read[i:i + PLAN_LINES_PER_FILE]))
        names.append(uri)
    return names


def read_plan_file(uri: str):
    for line in storage.read_text(uri).splitlines():
        if line:
            yield ListedObject(**json.loads(line))


def current_versions(cfg: Config, spec: ModelSpec) -> dict:
    """Everything that shapes a content's rows; rows are reused only when all of it is equal."""
    from transforms.ingest.parse import PARSER_VERSION

    return {"pipeline": PIPELINE_VERSION, "parser": PARSER_VERSION,
            "chunker": chunk_settings(cfg, spec).version,
            "contextualizer": contextualizer_version(cfg),
            "model": spec.namespace, "acl": [[r.prefix, list(r.groups)] for r in cfg.acl]
            + [[ACL_MATCH_VERSION, [cfg.source.root or ""]]],
            "ocr": cfg.parse.model_dump(mode="json"),
            "dedupe": cfg.dedupe.model_dump(mode="json")}


def plan_run(cfg: Config, input_uri: str, index_dir: str, spec: ModelSpec,
             report: Optional[dict] = None, scratch: Optional[str] = None) -> IndexPlan:
    listed = list_objects(input_uri, settings_from_config(cfg), report=report,
                          follow_outside=cfg.source.follow_links_outside_root,
                          skip_hidden=cfg.source.skip_hidden)
    if is_s3(index_dir):
        export_to_environment(settings_from_config(cfg))
        live = load_live(index_dir, scratch)
    else:
        live = load_live(index_dir) if os.path.isdir(index_dir) else None
    return make_plan(listed, live, processing_key(current_versions(cfg, spec)), cfg.source.full_hash)


def describe_plan(plan: IndexPlan) -> dict:
    live = plan.live.sources if plan.live else {}
    new = [lo.uri for lo in plan.to_read if lo.uri not in live]
    maybe_changed = [lo.uri for lo in plan.to_read if lo.uri in live]
    return {"listed": len(plan.listed), "new_paths": new, "to_read_existing_paths": maybe_changed,
            "removed_paths": plan.removed, "unchanged_paths": len(plan.skipped),
            "live_version": os.path.basename(plan.live.version_dir) if plan.live else None}


def dry_run(cfg: Config, input_uri: str, index_dir: str) -> str:
    """What a run would do. Objects whose size/mtime changed are read and hashed to tell a
    real change from a touch; nothing is parsed, embedded or written."""
    from transforms.ingest.read import read_object

    spec = model_spec_from_config(cfg)
    plan = plan_run(cfg, input_uri, index_dir, spec)
    live = plan.live.sources if plan.live else {}
    client = settings_from_config(cfg).client() if input_uri.startswith("s3://") else None
    known = set(plan.known_rep)
    added, added_known, changed, touched = [], [], [], []
    for lo in plan.to_read:
        h = read_object(lo, client).content_hash
        if lo.uri not in live:
            (added_known if h in known else added).append(lo.uri)
        elif live[lo.uri]["content_hash"] != h:
            changed.append(lo.uri)
        else:
            touched.append(lo.uri)
    lines = [f"dry run against {'live version ' + os.path.basename(plan.live.version_dir) if plan.live else 'an empty index'}:",
             f"  would add {len(added) + len(added_known)} paths ({len(added_known)} of them copies of indexed content, "
             "no new embedding)",
             f"  would re-process {len(changed)} changed paths",
             f"  would remove {len(plan.removed)} paths",
             f"  would carry over {len(plan.skipped) + len(touched)} unchanged paths "
             f"({len(touched)} touched but with the same content)"]
    for label, uris in (("add", added + added_known), ("change", changed), ("remove", plan.removed)):
        lines += [f"    {label:6s} {u}" for u in uris[:50]]
        if len(uris) > 50:
            lines.append(f"    ... and {len(uris) - 50} more to {label}")
    return "\n".join(lines)


def run_index(cfg: Config, input_uri: str, index_dir: str, *, progress: bool = True,
              beam_args: Optional[list[str]] = None, log=print) -> dict:
    """Index `input_uri` into a new version of `index_dir` (a local path or s3://); return the run summary."""
    if "://" in index_dir and not is_s3(index_dir):
        raise IndexPathError(f"--output {index_dir}: the index directory must be a local path or an s3:// prefix")
    refuse_output_inside_input(input_uri, index_dir, IndexPathError)
    export_to_environment(settings_from_config(cfg))  # workers resolve keys, the graph holds none
    from transforms.index.layout import refuse_foreign_output
    if is_s3(index_dir):
        index_dir = index_dir.rstrip("/")
    else:  # a non-empty folder that is not an index: refused before anything is made in it
        refuse_foreign_output(index_dir)
        os.makedirs(index_dir, exist_ok=True)
    with publish.index_lock(index_dir) as lock:  # one writer per index: a second run waits for none, it fails
        if is_s3(index_dir):  # on object storage once the lock (an index entry) is held; it goes on exit
            refuse_foreign_output(index_dir)
        import shutil
        import tempfile
        scratch = tempfile.mkdtemp(prefix="ragbeam-index-") if is_s3(index_dir) else None
        try:
            return _run_index(cfg, input_uri, index_dir, progress=progress, beam_args=beam_args, log=log,
                              lock=lock, scratch=scratch)
        finally:
            if scratch:
                shutil.rmtree(scratch, ignore_errors=True)


def _run_index(cfg: Config, input_uri: str, index_dir: str, *, progress: bool,
               beam_args: Optional[list[str]], log, lock=None, scratch: Optional[str] = None) -> dict:
    from transforms.index.manifest import reconcile, write_run_outputs
    from pipelines.segments import segment_version

    started = time.monotonic()
    spec = model_spec_from_config(cfg)
    from transforms.index.layout import describe_unexpected, unexpected_entries
    odd = unexpected_entries(index_dir)  # before any work: reported, ignored by every listing, never deleted
    if odd:
        log(f"ragbeam index: ignoring {len(odd)} entr{'y' if len(odd) == 1 else 'ies'} in {index_dir} that no "
            f"index run wrote (left as they are): {describe_unexpected(odd)}")
    log(f"ragbeam index: listing {input_uri}")
    remote = is_s3(index_dir)
    skipped_at_listing: dict = {}
    plan = plan_run(cfg, input_uri, index_dir, spec, report=skipped_at_listing, scratch=scratch)
    if not plan.listed:
        raise FileNotFoundError(f"{input_uri}: no objects to index")
    version = publish.new_version_name()
    publish.clear_staging(index_dir)
    cache_dir = namespace_dir(index_dir, spec.namespace)
    converted = convert_parquet_files(cache_dir)  # a cache of an earlier version: memory-mappable from now on
    if converted:
        log(f"ragbeam index: rewrote {converted} embedding cache file(s) of an earlier version as .arrow")
    recover_cache_entries(index_dir)
    out_dir = publish.staging_dir(index_dir, version)  # the workers write here (local dir or S3 prefix)
    work_dir = os.path.join(scratch, "staging", version) if remote else out_dir  # the driver works here
    os.makedirs(work_dir, exist_ok=True)
    indexed_at = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    log(f"ragbeam index: {len(plan.listed)} objects, {len(plan.to_read)} to read, "
        f"{len(plan.skipped)} unchanged, {len(plan.removed)} removed -> version {version} ({cfg.runner.name})")

    with beam.Pipeline(options=pipeline_options(cfg, beam_args)) as p:
        build_index_pipeline(p, plan, out_dir, cfg, spec, indexed_at, cache_dir, progress=progress,
                             live_signatures=live_signature_files(plan, index_dir)
                             if near_dup_settings(cfg) is not None else None,
                             context_cache=context_cache_dir(index_dir, cfg),
                             signature_deletions=live_signature_deletions(plan, index_dir))
    stats = read_counters(p.result)
    pipeline_s = time.monotonic() - started
    storage.delete_tree(storage.join(out_dir, PLAN_DIR))
    kill_point("after_pipeline")

    fetched = storage.download_tree(out_dir, work_dir, only=tuple(
        d + "/" for d in (CHUNKS_DIR, DOCUMENTS_DIR, DEAD_LETTERS_DIR, SOURCES_READ_DIR, NEAR_DUPLICATES_DIR,
                          SIGNATURES_DIR, KEPT_DOCUMENTS_DIR))) if remote else []
    changes, carry = write_sources_and_carry(plan, work_dir, index_dir=index_dir)
    if not shard_has_rows(work_dir, CHUNKS_DIR) and not (carry and carry.tables[CHUNKS_DIR].live_rows):
        dead = stats.get("read_errors", 0) + stats.get("dead_lettered_parse", 0)
        raise NoChunksError(f"no chunks to index from {input_uri}: {len(plan.listed)} objects, "
                            f"{dead} dead-lettered (reasons in {out_dir}/dead_letters); nothing published")
    # the run's new shards join the shared store; the version lists them and the live ones it keeps
    shards = list_version_shards(index_dir, work_dir, carry, staged_dir=out_dir if remote else None,
                                 cache=scratch if remote else None)
    segmented = {}
    # counts first: a run that does not reconcile is not published, so it builds no segments
    balanced = reconcile(stats, listed=len(plan.listed), skipped=len(plan.skipped))["balanced"]
    if cfg.artifacts.build and balanced:  # segments: built by workers, unchanged ones reused (pipelines/segments.py)
        segmented = segment_version(index_dir, work_dir, out_dir, cfg, spec,
                                    plan.live.manifest if plan.live else None, beam_args=beam_args, log=log,
                                    shards=shards, live_dir=publish.version_dir(
                                        index_dir, os.path.basename(plan.live.version_dir.rstrip("/")))
                                    if plan.live else None)
    artifact = {k: segmented[k] for k in ("artifact_s", "plan_s", "build_s", "stats_s")} if segmented else {}
    if segmented:
        artifact.update(segments=len(segmented["segments"]), rows=sum(s["live"] for s in segmented["segments"]),
                        **{k: v for k, v in segmented["segment_plan"].items() if k != "built_ids"})
    kill_point("after_artifact")
    summary = reconcile(stats, listed=len(plan.listed), skipped=len(plan.skipped))
    summary.update(changes)
    summary["shards"] = shards.summary()
    summary["skipped_at_listing"] = {k: len(v) for k, v in skipped_at_listing.items()}
    summary["skipped_at_listing_paths"] = {k: v[:100] for k, v in skipped_at_listing.items()}
    summary.update(version=version, input=input_uri, wall_s=round(time.monotonic() - started, 2),
                   pipeline_s=round(pipeline_s, 2), artifact=artifact,
                   previous_version=os.path.basename(plan.live.version_dir) if plan.live else None)
    versions = current_versions(cfg, spec)
    tables = shard_store.manifest_tables(work_dir, shards.tables)  # + the deletions, beside the manifest
    write_run_outputs(work_dir, cfg, spec, summary, versions=versions, processing_key=processing_key(versions),
                      segmented=segmented, tables=tables)
    if not summary["balanced"]:  # an element went missing somewhere: publishing would hide the loss
        raise UnbalancedRun(summary)
    # The eval gate (if configured) decides before anything becomes visible.
    from transforms.evaluation.gate import check_gate
    gate = check_gate(cfg, work_dir, index_dir, plan.live.version_dir if plan.live else None, log=log)
    if gate is not None:
        summary["gate"] = gate
        write_run_outputs(work_dir, cfg, spec, summary, versions=versions,
                          processing_key=processing_key(versions), segmented=segmented, tables=tables)
        if not gate["passed"]:
            raise GateFailed(gate, summary)
    if remote:
        upload_driver_outputs(work_dir, out_dir, fetched)
    if lock is not None:
        lock.check()  # a run whose lease ran out must not publish over its successor
    publish.publish(index_dir, version)
    kill_point("after_publish")
    summary["unexpected_entries"] = odd
    summary["warnings"] = after_switch(cfg, index_dir, version, cache_dir, summary, log)
    return summary


def after_switch(cfg: Config, index_dir: str, version: str, cache_dir: str, summary: dict, log) -> list[str]:
    """Everything after CURRENT names the new version: it is published, so nothing here may fail
    the run. Each step that fails is a warning (printed, and in the summary); the next run
    repeats it (cache entries left in the version dir are recovered, pruning runs again)."""
    from pipelines.segments import after_publish
    warnings: list[str] = []

    def step(what: str, fn):
        try:
            return fn()
        except Exception as e:
            warnings.append(f"{what} failed ({type(e).__name__}: {' '.join(str(e).split())[:200]}); the new "
                            "version is live, the next run does it again")
            log(f"ragbeam index: warning: {warnings[-1]}")
            return None
    # Commit after success: the new vectors join the cache only now.
    summary["cache_files_added"] = step("adding the new vectors to the embedding cache", lambda: commit_new_entries(
        publish.version_dir(index_dir, version), cache_dir, version))
    if cfg.contextualize.kind == "llm":  # the llm's contexts join their cache the same way
        summary["context_cache_files_added"] = step("adding the llm contexts to their cache", lambda: commit_new_entries(
            publish.version_dir(index_dir, version), context_cache_dir(index_dir, cfg), version, NEW_CONTEXTS_DIR))
    pruned = after_publish(index_dir, cfg.index.keep_versions, log)
    summary["pruned"], summary["pruned_segments"] = pruned["pruned"], pruned["pruned_segments"]
    summary["pruned_shards"] = pruned["pruned_shards"]
    return warnings + pruned["warnings"]


def upload_driver_outputs(work_dir: str, out_dir: str, fetched: list[str]) -> None:
    """Make the staging prefix equal the driver's work dir: upload what the driver made (sources,
    carried rows, segment statistics, manifest and summary last), drop what it consumed (sources_read)."""
    made = sorted(os.path.relpath(os.path.join(d, f), work_dir).replace(os.sep, "/")
                  for d, _, files in os.walk(work_dir) for f in files)
    made_set, fetched_set = set(made), set(fetched)
    last = ("manifest.json", "summary.json")
    for rel in [r for r in made if r not in fetched_set and r not in last] + [r for r in last if r in made_set]:
        storage.upload_file(os.path.join(work_dir, rel), storage.join(out_dir, rel))
    for rel in fetched:
        if rel not in made_set:
            storage.delete(storage.join(out_dir, rel))


def recover_cache_entries(index_dir: str) -> None:
    """A run killed between publishing and committing its new vectors (and, with the llm
    contextualizer, the llm's new contexts) left them in its version dir; they are durable and
    published, so they join their caches now. A version copied to versions/ but never published
    (killed before CURRENT) is left alone, as its rows are."""
    live = publish.current_version(index_dir)
    for name, new_dirs in sorted(pending_cache_entries(index_dir).items()):
        if live is None or name > live:
            continue
        vdir = publish.version_dir(index_dir, name)
        try:
            manifest = json.loads(storage.read_text(storage.join(vdir, "manifest.json")))
            namespace = manifest["model"]["namespace"]
        except (OSError, ValueError, KeyError):
            continue  # no manifest: not a version (yet), nothing of it is published
        if NEW_ENTRIES_DIR in new_dirs:
            commit_new_entries(vdir, namespace_dir(index_dir, namespace), name)
        contextualizer = str(manifest.get("versions", {}).get("contextualizer", ""))
        if NEW_CONTEXTS_DIR in new_dirs and is_llm_version(contextualizer):
            commit_new_entries(vdir, context_namespace_dir(index_dir, contextualizer), name, NEW_CONTEXTS_DIR)


def pending_cache_entries(index_dir: str) -> dict[str, set]:
    """version name -> which of its new-entry dirs (vectors, llm contexts) still hold files."""
    import glob
    kinds = (NEW_ENTRIES_DIR, NEW_CONTEXTS_DIR)
    out: dict[str, set] = {}
    if is_s3(index_dir):
        base = storage.join(index_dir, publish.VERSIONS) + "/"
        for uri in storage.list_files(base):
            parts = uri[len(base):].split("/")
            if len(parts) > 2 and parts[1] in kinds:
                out.setdefault(parts[0], set()).add(parts[1])
        return out
    for kind in kinds:
        for pending in glob.glob(os.path.join(index_dir, publish.VERSIONS, "*", kind)):
            out.setdefault(os.path.basename(os.path.dirname(pending)), set()).add(kind)
    return out


def shard_has_rows(version_dir: str, table: str) -> bool:
    import pyarrow.parquet as pq
    from transforms.index.shards import shard_files
    return any(pq.read_metadata(f).num_rows for f in shard_files(version_dir, table))


class NoChunksError(RuntimeError):
    pass


class IndexPathError(ValueError):
    pass


class UnbalancedRun(RuntimeError):
    """The run's counters do not add up (an input neither indexed, a duplicate nor dead-lettered)."""
    def __init__(self, summary: dict):
        super().__init__("the counts do not reconcile: " + "; ".join(summary.get("reconcile_problems") or ["?"]))
        self.summary = summary


class GateFailed(RuntimeError):
    def __init__(self, gate: dict, summary: dict):
        super().__init__(gate.get("message", "eval gate failed"))
        self.gate, self.summary = gate, summary
