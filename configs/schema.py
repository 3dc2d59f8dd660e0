"""The config schema: YAML is validated on load, and a bad line names its key.

Secrets come from the environment: any string value may be written as
`${VAR}` (or `${VAR:-default}`), and `RAGBEAM__SECTION__KEY=value` overrides
one key (e.g. `RAGBEAM__S3__ENDPOINT_URL`).
"""
from __future__ import annotations

import functools
import os
import re
from pathlib import Path
from typing import Any, ClassVar, Literal, Optional

import yaml
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from transforms.common.redact import (SECRET_KEYS, config_secret_values, declare_schema,  # noqa: F401
                                      is_secret_path, register_secret_values)
from transforms.ingest.profiles import MINILM_FIT  # the default profile's fitted numbers, quoted below

CONFIG_DIR = Path(__file__).parent
DEFAULT_CONFIG = CONFIG_DIR / "default.yaml"


class ConfigError(ValueError):
    pass


class _Strict(BaseModel):
    # allow_inf_nan=False: inf, -inf and nan are refused for every float key (issue 35, item 6):
    # a NaN weight makes every score NaN, and a NaN evidence compares as neither low nor high.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


# A key most jobs set: listed first in the configuration reference (configs/reference.py), the
# rest under "Expert settings". About twenty: tests/unit/test_config_reference.py keeps it so.
USER = {"user": True}


def _secret(description: str, user: bool = False):
    """A secret key: never in reprs, errors, logs, manifests or reports (transforms/common/redact.py
    reads the mark; a key named like a credential is secret even without it)."""
    return Field(None, repr=False, json_schema_extra={"secret": True, **(USER if user else {})},
                 description=description)


class RunnerConfig(_Strict):
    """The Beam runner the jobs run on."""
    # DirectRunner/FnApiRunner run in-process and never reach for Prism's download.
    name: str = Field("DirectRunner", json_schema_extra=USER,
                      description="any runner Beam knows by name (DataflowRunner, FlinkRunner, "
                      "SparkRunner, PortableRunner, ...) or a fully qualified runner class (my.module.MyRunner)")
    direct_running_mode: Literal["in_memory", "multi_threading", "multi_processing"] = Field(
        "in_memory", description="how the in-process runner runs its workers")
    direct_num_workers: int = Field(1, ge=1, le=256, json_schema_extra=USER,
                                    description="workers of the in-process runner; a cluster's come from "
                                    "runner.options (Flink: parallelism, Dataflow: max_num_workers)")
    # Checked by Beam's own PipelineOptions parser at load; credential-like names are secrets.
    options: dict[str, Any] = Field(default_factory=dict, json_schema_extra=USER,
                                    description="extra Beam pipeline options, passed as "
                                    "--key=value (e.g. setup_file, project, job_endpoint)")


class S3Config(_Strict):
    """Object storage (s3://) for inputs, indexes, question files and outputs."""
    endpoint_url: Optional[str] = Field(None, json_schema_extra=USER,
                                        description="S3-compatible endpoint (SeaweedFS, MinIO); unset: AWS")
    region: Optional[str] = Field(None, json_schema_extra=USER, description="the store's region")
    # Secrets: never in reprs, errors, logs or manifests; workers take theirs from their environment.
    access_key_id: Optional[str] = _secret("access key; unset: the boto3 chain", user=True)
    secret_access_key: Optional[str] = _secret("secret key; unset: the boto3 chain", user=True)


class SourceConfig(_Strict):
    """Listing and reading the input."""
    full_hash: bool = Field(False, description="re-hash every object even when size and mtime are unchanged")
    max_object_bytes: int = Field(256 * 1024 * 1024, ge=1, description="an object larger than this is dead-lettered "
                                  "unread")
    follow_links_outside_root: bool = Field(False, description="follow symbolic links whose target lies outside the "
                                            "input root (false: skipped and counted)")
    skip_hidden: bool = Field(True, description="files and folders whose name starts with '.' are not indexed but "
                              "counted, with their paths, in skipped_at_listing.hidden; false: indexed like any other")
    root: Optional[str] = Field(None, description="a folder or s3:// prefix that ACL rule prefixes are relative to; "
                                "unset: rules match any '/'-boundary suffix of the object's URI")


class ParseConfig(_Strict):
    """Parsing documents, OCR of scanned PDF pages, and what one document may inflate to."""
    ocr: Literal["auto", "off", "force"] = Field("auto", json_schema_extra=USER,
                                                 description="OCR of PDF pages (rapidocr on onnxruntime): "
                                                 "auto: only pages without a text layer; force: every page; off: never")
    ocr_dpi: int = Field(300, ge=72, le=600,  # below ~250 dpi the bundled model drops word spaces
                         description="resolution a page is rendered at for OCR")
    ocr_min_confidence: float = Field(0.75, ge=0.0, le=1.0, description="a page read with a lower mean confidence "
                                      "is dead-lettered on its own")
    # max_object_bytes bounds only what is read; these bound what it inflates to
    # (transforms/ingest/parse/limits.py).
    max_text_chars: int = Field(50_000_000, ge=1, description="a document's extracted text (a JSONL record's or a "
                                "file's) past this is dead-lettered")
    max_inflated_bytes: int = Field(256 * 1024 * 1024, ge=1, description="what a PDF's compressed streams may "
                                    "inflate to, all together; past it the file is dead-lettered before parsing")


class DedupeConfig(_Strict):
    """Near-duplicate documents (MinHash + LSH over word shingles, per ACL); part of the processing key."""
    # A near-copy is not chunked or embedded, its paths join its representative's sources.
    # Measured on debian-docs: at 0.9 with 3-word shingles no wrong merge (docs/near-duplicates.md).
    near_duplicates: bool = Field(True, description="merge near-copies into one document; false: exact dedupe only")
    threshold: float = Field(0.9, gt=0.0, le=1.0, description="estimated Jaccard of the shingle sets")
    shingle_size: int = Field(3, ge=1, le=20, description="words per shingle")
    num_perm: int = Field(128, ge=16, le=1024, description="MinHash permutations (signature: 4 bytes each)")


class AclRule(_Strict):
    """Groups for the files under a key prefix; a JSONL record's own acl only narrows them."""
    prefix: str = Field(json_schema_extra=USER, description="key prefix (see source.root for what the key is "
                        "relative to)")
    # At least one group: an empty list would read as "public" downstream, so it is refused.
    groups: list[Annotated[str, StringConstraints(min_length=1, strip_whitespace=True)]] = Field(
        min_length=1, json_schema_extra=USER, description="groups allowed to see these files (at least one)")


class ChunkConfig(_Strict):
    """Chunking, counted in the model's own word pieces."""
    chunk_tokens: int = Field(200, ge=16, le=254, json_schema_extra=USER, description="word pieces of chunk text "
                              "(with context_tokens and 2 special tokens, at most embed.max_length)")
    overlap_tokens: int = Field(32, ge=0, le=128, description="word pieces shared by neighbouring chunks")
    context_tokens: int = Field(40, ge=0, le=128, description="word pieces reserved for the \"title › section\" "
                                "prefix")


class ContextualizeConfig(_Strict):
    """The context prefix embedded with each chunk."""
    kind: Literal["title_path", "llm", "none"] = Field(
        "title_path", description="title_path: \"title › section\"; llm: that plus one or two sentences the llm "
                                  "writes to situate the chunk in its document (cached per document and chunk "
                                  "hash, model and prompt version); none: no prefix")
    doc_chars: int = Field(3000, ge=200, le=200_000, description="llm: characters of the document shown with each "
                           "chunk (its start)")
    max_tokens: int = Field(80, ge=8, le=1024, description="llm: the most tokens the llm may write for one chunk "
                            "(then cut to chunk.context_tokens)")


EmbedProfileName = Literal["minilm", "fast", "minilm-q8", "bge-small", "e5-small"]  # transforms/ingest/profiles.py


class EmbedConfig(_Strict):
    """The embedding model (onnxruntime) and its conventions (a profile: transforms/ingest/profiles.py)."""
    profile: Optional[EmbedProfileName] = Field(
        None, json_schema_extra=USER,
        description="a named model and its conventions: minilm (the packaged all-MiniLM-L6-v2 int8; alias "
                          "fast), minilm-q8, bge-small, e5-small (the last three installed by make models); "
                          "unset: minilm")
    model_path: Optional[str] = Field(None, description="another BERT-family ONNX export (the profile gives its "
                                      "conventions); unset: the profile's model")
    model_sha256: Optional[str] = Field(None, description="the model file's sha256 (required with model_path)")
    tokenizer_path: Optional[str] = Field(None, description="its tokenizer.json; unset: the profile's")
    model_id: Optional[str] = Field(None, description="the model's name in manifests and cache namespaces")
    pooling: Optional[Literal["mean", "cls"]] = Field(None, description="mean of the token states or the CLS row; "
                                                      "unset: the profile's")
    query_prefix: Optional[str] = Field(None, max_length=1000, description="put before every question; unset: "
                                        "the profile's")
    passage_prefix: Optional[str] = Field(None, max_length=1000, description="put before every chunk and sentence "
                                          "embedded; unset: the profile's")
    normalize: Optional[bool] = Field(None, description="L2-normalise the vectors; unset: the profile's (true)")
    max_length: Optional[int] = Field(None, ge=8, le=512, description="the model's input length in word pieces; "
                                      "unset: the profile's (256 for minilm)")
    dim: Optional[int] = Field(None, ge=1, le=65536, description="vector dimension; unset: read from the model")
    batch_size: int = Field(8, ge=1, le=1024, description="texts per model call (8 is as fast as 32 on CPU, "
                            "with less padding and memory)")
    intra_op_threads: int = Field(0, ge=0, le=256, description="onnxruntime threads; 0: onnxruntime decides")


class ArtifactConfig(_Strict):
    """The segments built for each version (docs/index-layout.md)."""
    build: bool = Field(True, description="build the version's segments after the pipeline (without them "
                        "the version cannot be answered from until `ragbeam build-artifacts` builds them)")


# Keys that configs written for an older ragbeam may still hold: refused like any unknown key,
# with what became of them.
REMOVED_KEYS = {
    "artifacts.hnsw": "removed with the DuckDB HNSW index: segments are searched exactly; delete it",
    "artifacts.recall_sample": "removed with the DuckDB HNSW index (no recall to measure); delete it",
    "artifacts.recall_questions": "removed with the DuckDB HNSW index (no recall to measure); delete it",
}


class IndexConfig(_Strict):
    """Versions of the index."""
    keep_versions: int = Field(3, ge=1, le=1000, json_schema_extra=USER,
                               description="versions kept (never the live one pruned)")
    segment_max_chunks: int = Field(250_000, ge=1, description="chunks per segment at most: new rows are cut "
                                    "into ceil(n / this) equal segments; an answer worker holds one segment")
    merge_factor: int = Field(8, ge=2, le=100, description="tiered merge: once a size tier holds this many "
                              "segments (below half segment_max_chunks) they are merged into one")
    merge_floor_chunks: int = Field(10_000, ge=1, description="tiered merge: segments up to this size are all "
                                    "one tier; tiers above grow by merge_factor")
    merge_max_deleted_fraction: float = Field(0.3, gt=0, le=1, description="a segment whose tombstones exceed "
                                              "this fraction of its rows is rewritten without them")
    ann: Literal["none", "hnsw"] = Field("none", description="hnsw: build a faiss HNSW graph (inner product) with "
                                         "every segment, for retrieve.mode ann; part of the segment id, so changing "
                                         "it or hnsw_* rebuilds the segments on the next index run; none: exact "
                                         "search only")
    hnsw_m: int = Field(32, ge=4, le=128, description="ann hnsw: graph neighbours per node (M); about 4·M·2 bytes "
                        "a chunk besides its vector")
    hnsw_ef_construction: int = Field(80, ge=8, le=1024, description="ann hnsw: candidate list while building "
                                      "(efConstruction); higher builds slower and finds more")


class RetrieveConfig(_Strict):
    """First-stage retrieval: dense and BM25 lists and their fusion."""
    dense_top_n: int = Field(50, ge=1, le=1000, description="dense candidates per question")
    bm25_top_n: int = Field(50, ge=1, le=1000, description="BM25 candidates per question")
    mode: Literal["auto", "exact", "ann"] = Field("auto", description="dense search: exact: every segment by one "
                                                  "matrix product; ann: a segment built with an HNSW graph "
                                                  "(index.ann) by the graph, efSearch hnsw_ef_search, filters and "
                                                  "tombstones applied inside it, others exactly; auto = exact")
    hnsw_ef_search: int = Field(128, ge=1, le=4096, description="mode ann: HNSW candidate list per question "
                                "(efSearch; at least dense_top_n + 8 is searched); higher is slower and finds more")
    search_threads: int = Field(0, ge=0, le=1024, description="threads that search one segment's question batch "
                                "(top-k, BM25 sums, hits; the matrix product uses BLAS's own threads); 0: the "
                                "worker's CPU count. Results do not depend on it")
    rrf_k: int = Field(60, ge=1, description="rrf: the rank constant")
    dense_weight: float = Field(1.0, ge=0, description="rrf: weight of the dense list")
    bm25_weight: float = Field(1.0, ge=0, description="rrf: weight of the BM25 list")
    fused_top_n: int = Field(30, ge=1, le=1000, description="fused candidates passed on to rerank and answer")
    # Convex on fixed scales replaced RRF and per-query min-max, each of which lost a dev set to a
    # single retriever (docs/evaluation.md).
    fusion: Literal["rrf", "convex"] = Field("convex", description="convex: fusion_alpha × dense + (1 − "
                                             "fusion_alpha) × BM25, each normalised by fusion_norm, a chunk missing "
                                             "from one list scored exactly there; rrf: reciprocal rank fusion")
    fusion_alpha: Optional[float] = Field(None, ge=0, le=1, description="convex: weight of the dense score; unset: "
                                          f"the one fitted for the embedding profile (minilm: "
                                          f"{MINILM_FIT.fusion_alpha})")
    fusion_alpha_min: Optional[float] = Field(None, ge=0, le=1, description="convex: the dense weight when the dense "
                                              "list's top ten are level; it rises to fusion_alpha as the first hit leads "
                                              "(fuse.adaptive_alpha); equal to fusion_alpha: a fixed weight; unset: the "
                                              "embedding profile's (minilm: fixed)")
    fusion_norm: Optional[Literal["minmax", "zscore", "max", "bound", "floor"]] = Field(
        None, description="convex: bound: the cosine as it is and BM25 over the question's best possible score; "
                          "floor: the cosine above the question's last dense hit, stretched to 0..1, and BM25 as "
                          "bound; minmax, zscore, max: per-query normalisation; unset: the embedding profile's "
                          "(minilm: bound)")
    bm25_k1: Optional[float] = Field(None, gt=0, description="BM25 k1; unset: 1.2")
    bm25_b: Optional[float] = Field(None, ge=0, le=1, description="BM25 b; unset: 0.75")


class RerankConfig(_Strict):
    """Second-stage reranking (off by default: it lowered nDCG@10 on the dev sets)."""
    kind: Literal["embedding", "cross_encoder", "none"] = Field("none", description="embedding: rescore by the "
                                                               "best-matching sentence; cross_encoder: an ONNX model")
    model_dir: Optional[str] = Field(None, description="cross_encoder: folder holding model.onnx + tokenizer.json")
    top_n: int = Field(20, ge=1, le=1000, description="candidates reranked")
    fusion: Optional[Literal["rrf", "blend", "none"]] = Field(
        None, description="how the rerank order folds back into the first-stage order; unset: the reranker's "
                          "own (rrf for embedding, none for cross_encoder)")
    top_sentences: int = Field(1, ge=1, le=20, description="embedding: mean of the best N sentence cosines")
    chunk_weight: float = Field(0.0, ge=0, description="embedding: weight of the whole chunk's cosine")


class AnswerConfig(_Strict):
    """Answering: the extractive default (transforms/query/extract.py) or a generator backend."""
    # answer.threshold's default with evidence: sentence (the fitted thresholds are the profile's)
    SENTENCE_THRESHOLD: ClassVar[float] = 0.58
    kind: Literal["extractive", "openai", "bedrock"] = Field(
        "extractive", json_schema_extra=USER,
        description="extractive: sentences from the top chunks, one model call a question; openai: "
                                  "an OpenAI-compatible server (vLLM, llama.cpp, Ollama); bedrock: AWS Bedrock")
    max_sentences: Optional[int] = Field(None, ge=1, le=20, json_schema_extra=USER,
                                         description="sentences in an extractive answer, at most; "
                                         f"unset: the embedding profile's fit (minilm: {MINILM_FIT.max_sentences})")
    top_chunks: int = Field(5, ge=1, le=50, description="chunks whose sentences are scored (and sources a "
                            "generator sees)")
    selection: Literal["rules", "model"] = Field(
        "rules", description="rules: the hand-weighted selection (cosine + word share, form filters, call rules); "
                             "model: a page chosen by the evidence of all its retrieved chunks, then its sentences, "
                             "by one fitted model, with a calibrated confidence deciding not found "
                             "(transforms/query/answer_model.json, python -m bench.fit_answer_model; measured below "
                             "rules on the dev sets' answers so far, docs/answering.md)")
    read_chunks: int = Field(20, ge=1, le=200, description="selection model: the chunks of the ranked list whose "
                             "pages and sentences are scored")
    page_first: bool = Field(True, description="selection rules: choose the page first, by the fitted model's page "
                             "and sentence scores over the read_chunks (the evidence of all its retrieved chunks), "
                             "then pick the sentences from that page's chunks by the rules")
    evidence: Literal["model", "sentence"] = Field(
        "model", description="model: the probability that the chunks answer the question (a logistic model over "
                             "sentence and retrieval scores, fitted per embedding profile); sentence: the best sentence "
                             "score alone")
    threshold: Optional[float] = Field(None, ge=-1, le=2, json_schema_extra=USER,
                                       description="below it the answer is \"Not found in the "
                                       "sources.\"; with selection model, in confidence units (unset: the fitted "
                                       "model's threshold); with rules, unset: the embedding profile's fitted "
                                       f"evidence threshold (minilm: {MINILM_FIT.evidence_threshold}), "
                                       f"{SENTENCE_THRESHOLD} for sentence")
    # Extractive selection; the defaults were picked on SQuAD by bench/studies/answer_fit.py.
    gap: float = Field(0.12, ge=0, le=2, description="a further sentence joins only if it scores within this of "
                       "the best")
    conflict_gap: float = Field(0.15, ge=0, le=2, description="sentences scoring within this of the best are read "
                                "for competing numbers and dates (the answer's conflicts); 0 turns the check off")
    lexical_weight: Optional[float] = Field(None, ge=0, le=2, description="weight of the share of the question's "
                                            f"words a sentence holds; unset: the embedding profile's (minilm: "
                                            f"{MINILM_FIT.lexical_weight})")
    lexical_idf: bool = Field(True, description="weigh the question's words by inverse document frequency")
    type_weight: float = Field(0.1, ge=0, le=2, description="bonus when the sentence holds the kind of span asked "
                               "for (year, number, percent, name)")
    same_source_bonus: float = Field(0.1, ge=0, le=2, description="bonus for a further sentence from an "
                                     "already-cited chunk")
    evidence_lexical_weight: float = Field(0.5, ge=0, le=2, description="the sentence evidence is cosine + this × "
                                           "the word share")
    rank_weight: float = Field(0.0, ge=0, le=2, description="bonus rank_weight / the chunk's rank")
    mmr_lambda: float = Field(1.0, ge=0, le=1, description="MMR trade-off between score and novelty; 1: score only")
    dup_sim: float = Field(0.95, ge=0, le=1, description="drop a sentence this similar to one already picked")
    form_filter: bool = Field(True, description="table rows, parameter lists, code listings and navigation text "
                              "answer only the questions that ask for what they hold (a table or parameter list: "
                              "what/which/how many; code: how do I, which function); a \"how do I\" answer leads "
                              "with its call or command")
    restate_overlap: float = Field(0.8, ge=0, le=1, description="drop a sentence when the shorter of it and a picked "
                                   "one has this share of its content words in the other (a restatement); 0: off")
    call_lexical: bool = Field(True, description="a call question's word share counts the parts of compound "
                               "identifiers (NamedTemporaryFile) and abbreviations and inflections (str: string)")
    call_chunks: int = Field(30, ge=0, le=1000, description="a call question also reads the definitions (term "
                             "line, then description) of the chunks after top_chunks, up to this many; 0: off")
    call_definitions_alone: int = Field(8, ge=0, le=1000, description="a call question scores up to this many "
                                        "descriptions of calls (those sharing most of its words) by the sentence's own "
                                        "vector, embedded when answering, not its late-chunked one; 0: off")
    base_url: Optional[str] = Field(None, json_schema_extra=USER, description="openai: the endpoint (http or https)")
    model: Optional[str] = Field(None, json_schema_extra=USER, description="openai, bedrock: the model name")
    api_key: Optional[str] = _secret("openai: the API key", user=True)
    region: Optional[str] = Field(None, description="bedrock: the AWS region")
    timeout_s: float = Field(30.0, gt=0, le=3600, description="seconds for one request to the generator backend")
    retries: int = Field(2, ge=0, le=10, description="extra attempts after a timeout or a retryable HTTP status")
    backoff_s: float = Field(1.0, ge=0, le=300, description="seconds before the first retry")
    budget_s: Optional[float] = Field(3600.0, gt=0, description="seconds of generator time one worker may spend in "
                                      "total; then its remaining questions become error records (unset: no budget)")
    concurrency: int = Field(4, ge=1, le=256, description="openai, bedrock: requests one worker keeps in flight; "
                             "match the server's slots (llama-server --parallel, vLLM max_num_seqs)")
    max_tokens: int = Field(512, ge=1, le=32768, description="openai, bedrock: the most tokens a generated answer "
                            "may have")
    max_source_chars: int = Field(6000, ge=100, le=1_000_000, description="openai, bedrock: characters of each "
                                  "source chunk put in the prompt")
    claim_support: float = Field(0.6, ge=0, le=1, description="openai, bedrock: a generated sentence stays only if "
                                 "every number and identifier it states is in the sources it cites and this share "
                                 "of its other words are (transforms/query/grounding.py); 0: no claim check")



class LLMConfig(_Strict):
    """The chat model behind the LLM features (contextualize.kind: llm, rewrite, judge): any OpenAI-compatible
    server (llama.cpp's llama-server, vLLM, Ollama). The answer generator has its own keys under answer."""
    base_url: Optional[str] = Field(None, description="the endpoint (http or https), e.g. http://127.0.0.1:8080/v1")
    model: Optional[str] = Field(None, description="the model name the server serves")
    api_key: Optional[str] = _secret("the API key")
    timeout_s: float = Field(120.0, gt=0, le=3600, description="seconds for one request")
    retries: int = Field(2, ge=0, le=10, description="extra attempts after a timeout or a retryable HTTP status")
    backoff_s: float = Field(1.0, ge=0, le=300, description="seconds before the first retry")
    concurrency: int = Field(4, ge=1, le=256, description="requests one worker keeps in flight; match the "
                             "server's slots")
    budget_s: Optional[float] = Field(None, gt=0, description="seconds of llm time one worker may spend in total "
                                      "(unset: no budget)")


class RewriteConfig(_Strict):
    """Query rewriting by the llm: the question's vector fused with the vectors of what the llm writes."""
    kind: Literal["none", "multi_query", "hyde"] = Field(
        "none", description="multi_query: n paraphrases, each embedded as a question; hyde: a hypothetical "
                            "answer passage, embedded as a passage; none: the question alone")
    n: int = Field(3, ge=1, le=8, description="multi_query: paraphrases asked for")
    question_weight: float = Field(0.5, ge=0, le=1, description="the question's own vector's share of the fused "
                                   "query vector; the rewrites share the rest equally")
    max_tokens: int = Field(128, ge=8, le=2048, description="the most tokens the llm may write per question")


class JudgeConfig(_Strict):
    """LLM-judged answer quality in `ragbeam eval`: faithfulness and answer relevance, by the llm."""
    max_questions: int = Field(100, ge=1, le=1_000_000, description="answered questions judged, at most (the "
                               "first ones in the dataset's order)")


class QuestionsConfig(_Strict):
    """Reading question files."""
    max_line_bytes: int = Field(1024 * 1024, ge=1024, le=1024 * 1024 * 1024, description="a question line (JSONL "
                                "line, CSV row, Parquet row) over this is an error record for that line, read in "
                                "bounded memory")


class OutputConfig(_Strict):
    """The answer file."""
    format: Literal["jsonl", "parquet"] = Field("jsonl", json_schema_extra=USER, description="the answer file's format")
    retrieved_top_k: int = Field(10, ge=1, le=100, json_schema_extra=USER,
                                 description="chunks listed in each answer record's retrieved list")
    shards: Optional[int] = Field(None, ge=1, le=100000, description="a fixed number of answer shards; unset: one "
                                  "shard per questions_per_shard questions")
    questions_per_shard: int = Field(10000, ge=1, le=10000000, description="questions in one answer shard (the "
                                     "unit a rerun after a crash skips)")
    batch_size: int = Field(64, ge=1, le=100000, description="questions answered in one engine call")


class GateConfig(_Strict):
    """Eval gate: a new version is published only if it passes on a golden set."""
    dataset: str = Field(description="a BEIR folder: queries.jsonl + qrels/test.tsv; corpus ids are the index's "
                         "doc ids")
    metric: str = Field("ndcg@10", description="the metric gated on")
    stage: Literal["bm25", "dense", "hybrid", "final", "reranked"] = Field(
        "hybrid", description="the ranking scored (reranked: old name of final)")
    min: Optional[float] = Field(None, ge=0, le=1, description="absolute floor")
    max_drop: Optional[float] = Field(None, ge=0, le=1, description="no worse than the live version by more "
                                      "than this")
    max_questions: int = Field(200, ge=1, description="questions scored, at most")


class Config(_Strict):
    runner: RunnerConfig = RunnerConfig()
    s3: S3Config = S3Config()
    source: SourceConfig = SourceConfig()
    parse: ParseConfig = ParseConfig()
    dedupe: DedupeConfig = DedupeConfig()
    acl: list[AclRule] = Field(default_factory=list, json_schema_extra=USER,
                               description="rules giving groups to files under a key prefix")
    chunk: ChunkConfig = ChunkConfig()
    contextualize: ContextualizeConfig = ContextualizeConfig()
    embed: EmbedConfig = EmbedConfig()
    artifacts: ArtifactConfig = ArtifactConfig()
    index: IndexConfig = IndexConfig()
    retrieve: RetrieveConfig = RetrieveConfig()
    rerank: RerankConfig = RerankConfig()
    answer: AnswerConfig = AnswerConfig()
    llm: LLMConfig = LLMConfig()
    rewrite: RewriteConfig = RewriteConfig()
    judge: Optional[JudgeConfig] = Field(None, description="unset: no llm judge in eval")
    questions: QuestionsConfig = QuestionsConfig()
    output: OutputConfig = OutputConfig()
    gate: Optional[GateConfig] = Field(None, description="unset: no gate")

    # Every secret value this config holds is known to redact_text in any process that holds the
    # config: where it was loaded, and on a worker that unpickled it (issue 35, item 2).
    def model_post_init(self, context: Any) -> None:
        register_secret_values(config_secret_values(self))

    def __setstate__(self, state):
        super().__setstate__(state)
        register_secret_values(config_secret_values(self))

    # What the config leaves unset is the embedding profile's fit (profiles.ScoreFit): fusion and
    # the evidence model were fitted on one model's scores and do not carry over to another's.
    @property
    def score_fit(self):
        from transforms.ingest.profiles import named_profile
        return named_profile(self.embed.profile).fit

    def _or_fit(self, value, name: str):
        return getattr(self.score_fit, name) if value is None else value

    @property
    def fusion_alpha(self) -> float:
        return self._or_fit(self.retrieve.fusion_alpha, "fusion_alpha")

    @property
    def fusion_alpha_min(self) -> Optional[float]:
        return self._or_fit(self.retrieve.fusion_alpha_min, "fusion_alpha_min")

    @property
    def fusion_norm(self) -> str:
        return self._or_fit(self.retrieve.fusion_norm, "fusion_norm")

    @property
    def answer_params(self):
        """The extractive answerer's settings in force (transforms/query/answer_params.py)."""
        from transforms.query.answer_params import answer_params
        return answer_params(self)

    # the answer settings in force that manifests, reports and resume fingerprints record
    @property
    def lexical_weight(self) -> float:
        return self.answer_params.lexical_weight

    @property
    def max_sentences(self) -> int:
        return self.answer_params.max_sentences

    @property
    def evidence_model(self) -> Optional[tuple]:
        return self.answer_params.evidence_model

    @property
    def answer_model(self):
        """The fitted answer selection (selection.AnswerModel) when answer.selection is model, else None."""
        return self.answer_params.answer_model

    @property
    def confidence_model(self):
        """The embedding profile's fitted model (selection.AnswerModel) whose rules calibration gives
        a rules answer its confidence; None where none is fitted for the profile."""
        return self.answer_params.confidence_model

    @property
    def evidence_threshold(self) -> float:
        return self.answer_params.threshold


_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def _expand_env(value: Any, where: str, environ) -> Any:
    if isinstance(value, dict):
        return {k: _expand_env(v, f"{where}.{k}" if where else str(k), environ) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand_env(v, f"{where}[{i}]", environ) for i, v in enumerate(value)]
    if isinstance(value, str):
        def sub(m):
            if m.group(1) in environ:
                return environ[m.group(1)]
            if m.group(2) is not None:
                return m.group(2)
            raise ConfigError(f"{where}: environment variable {m.group(1)} is not set")
        return _ENV_REF.sub(sub, value)
    return value


declare_schema(Config)  # the secret keys are read off the schema: one list, never kept by hand


def _field_wants_structure(path: list[str]) -> bool:
    """Does the schema give this key a list/dict/model type (so an env value is parsed as YAML)?"""
    import typing
    model: Any = Config
    ann: Any = None
    for i, part in enumerate(path):
        fields = getattr(model, "model_fields", None)
        if fields is None or part not in fields:
            return False
        ann = fields[part].annotation
        model = next((a for a in (ann, *typing.get_args(ann))
                      if isinstance(a, type) and issubclass(a, BaseModel)), None)
        if model is None and i < len(path) - 1:
            return False  # e.g. runner.options.<name>: the value of a dict entry, a string
    origins = {typing.get_origin(a) or a for a in (ann, *typing.get_args(ann))}
    return bool(origins & {list, dict}) or model is not None


ENV_PREFIX = "RAGBEAM__"
# One name of a section or key as a variable spells it: letters and digits, single underscores inside.
_ENV_PART = re.compile(r"[A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+)*")


def _apply_env_overrides(data: dict, environ, origins: Optional[dict] = None) -> dict:
    """RAGBEAM__SECTION__KEY=value. The value is a string, taken as written (no YAML: `abc #def`
    stays whole and `null` stays "null"), unless the key's type is a list, a mapping or a section,
    where it is parsed as YAML/JSON. Numbers and booleans are converted by the schema.
    A RAGBEAM__ variable that does not spell a key path (`RAGBEAM__`, `RAGBEAM__LLM____MODEL`,
    `RAGBEAM__LLM__MODEL_`) is refused, naming it, never ignored. `origins` gets each key path
    an override set, with the variable's name, so errors about its value name the variable."""
    for name, value in sorted(environ.items()):
        if not name.startswith(ENV_PREFIX):
            continue
        parts = name[len(ENV_PREFIX):].split("__")
        if not all(_ENV_PART.fullmatch(p) for p in parts):
            raise ConfigError(f"environment variable {name}: not a config override: expected "
                              f"{ENV_PREFIX}SECTION__KEY, names of letters and digits joined by '__' "
                              f"(e.g. {ENV_PREFIX}LLM__API_KEY); unset it or fix its name")
        path = [p.lower() for p in parts]
        if origins is not None:
            origins[tuple(path)] = name
        node = data
        for part in path[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"environment variable {name}: {'.'.join(path)} does not name a config key")
        if _field_wants_structure(path) and value.strip():
            from configs.yaml_safe import YamlConfigError, load_yaml
            try:
                node[path[-1]] = load_yaml(value)
            except YamlConfigError as e:
                raise ConfigError(f"environment variable {name}: {'.'.join(path)}: {e}") from None
            except (yaml.YAMLError, RecursionError):
                raise ConfigError(f"environment variable {name}: {'.'.join(path)}: not valid YAML/JSON") from None
        else:
            node[path[-1]] = value
    return data


def _origin(key: str, source: str, origins: Optional[dict]) -> str:
    """Where a key's value came from: the environment variable that set it (or a section above
    or below it), else the config file."""
    if origins:
        path = tuple(p for p in re.split(r"[.\[\]]+", key) if p and not p.isdigit())
        over = [p for p in origins if path[:len(p)] == p] or [p for p in origins if p[:len(path)] == path]
        if over:
            return f"environment variable {origins[max(over, key=len)]}"
    return source


def _nearest_key(loc: tuple) -> Optional[str]:
    """The schema's key closest to an unknown one (a typo's intended name), or None."""
    import difflib
    import typing
    model: Any = Config
    for part in loc[:-1]:
        if isinstance(part, int):
            continue  # a list entry: the list's item model was taken with its key
        field = getattr(model, "model_fields", {}).get(part)
        if field is None:
            return None
        model = next((a for a in (field.annotation, *typing.get_args(field.annotation))  # a section, Optional or list
                      if isinstance(a, type) and issubclass(a, BaseModel)), None)
        if model is None:
            return None
    close = difflib.get_close_matches(str(loc[-1]), list(model.model_fields), n=1)
    return close[0] if close else None


def _format_error(source: str, err: ValidationError, origins: Optional[dict] = None) -> str:
    from transforms.common.redact import redact_text
    lines = []
    for e in err.errors():
        key = ".".join(str(p) for p in e["loc"]) or "(top level)"
        if e["type"] == "extra_forbidden":
            if key in REMOVED_KEYS:
                msg = f"unknown key ({REMOVED_KEYS[key]})"
            else:
                near = _nearest_key(tuple(e["loc"]))
                msg = "unknown key" + (f"; did you mean {near!r}?" if near else "")
        else:
            msg = e["msg"]
            if "input" in e and e["type"] != "missing":
                if is_secret_path(tuple(e["loc"])):
                    msg += " (value hidden: secret)"
                else:
                    msg += f" (got {redact_text(repr(e['input']))[:200]})"
        lines.append(f"{_origin(key, source, origins)}: {key}: {msg}")
    return "\n".join(lines)


SPECIAL_TOKENS = 2  # [CLS] + [SEP]: what the embedding model adds to every input


def _check_runner(cfg: "Config") -> list[str]:
    """runner.name: a runner Beam knows, or a fully qualified class; runner.options: Beam's parser."""
    errors = []
    name = cfg.runner.name
    if "." in name:
        if not re.fullmatch(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+", name):
            errors.append(f"runner.name: not a runner name nor a fully qualified class (got {name!r})")
    else:
        from apache_beam.options.pipeline_options import StandardOptions
        known = {p.rsplit(".", 1)[-1].lower(): p.rsplit(".", 1)[-1] for p in StandardOptions.ALL_KNOWN_RUNNERS}
        known.setdefault("fnapirunner", "FnApiRunner")
        if name.lower() not in known and name.lower() + "runner" not in known:
            errors.append(f"runner.name: unknown runner {name!r}; one of {', '.join(sorted(known.values()))}, "
                          "or a fully qualified runner class")
    errors += validate_beam_options(cfg.runner.options, name)
    return errors


@functools.lru_cache(maxsize=1)
def _beam_parser():
    """Beam's own argument parser with every PipelineOptions subclass's options added."""
    import contextlib
    from apache_beam.options.pipeline_options import PipelineOptions, _BeamArgumentParser

    parser = _BeamArgumentParser(allow_abbrev=False)

    def all_subclasses(c):
        for sub in c.__subclasses__():
            yield sub
            yield from all_subclasses(sub)
    for cls in set(all_subclasses(PipelineOptions)):
        with contextlib.suppress(Exception):
            cls._add_argparse_args(parser)
    return parser


def beam_option_names() -> frozenset[str]:
    """Every pipeline option name Beam's Python SDK declares (as `runner.options` keys)."""
    return frozenset(a.dest for a in _beam_parser()._actions)


def validate_beam_options(options: dict, runner_name: str = "") -> list[str]:
    """Check runner.options with Beam's own PipelineOptions parser: unknown names and bad values
    are reported like any other config error (credential-like values are never printed). For
    the runners that reach a Flink job server, the Flink runner's Java-side options (which the
    Python SDK does not declare, and passes through) are accepted by name."""
    import difflib
    from configs.flink_options import FLINK_RUNNER_OPTIONS, passes_through
    import argparse
    import contextlib
    import io

    errors = []
    parser = _beam_parser()
    known = beam_option_names()
    for key, value in sorted(options.items()):
        where = f"runner.options.{key}"
        shown = "(value hidden: secret)" if is_secret_path(("runner", "options", key)) else f"(got {value!r})"
        if not isinstance(key, str) or not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", key):
            errors.append(f"{where}: not a pipeline option name")
            continue
        if key not in known:
            if passes_through(runner_name, key):
                continue  # the job server parses it (Java side)
            close = difflib.get_close_matches(key, sorted(known | FLINK_RUNNER_OPTIONS), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            errors.append(f"{where}: not a Beam pipeline option{hint}")
            continue
        arg = (f"--{key}" if value is True else None) if isinstance(value, bool) else f"--{key}={value}"
        if arg is None:
            continue
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                parser.parse_known_args([arg])
        except SystemExit:
            lines = [ln for ln in err.getvalue().splitlines() if "error:" in ln]
            reason = lines[-1].split("error:", 1)[1].strip() if lines else "rejected by Beam's parser"
            if shown.startswith("(value hidden"):
                reason = reason.split(":", 1)[0]
            errors.append(f"{where}: {reason} {shown}")
        except (argparse.ArgumentError, ValueError, TypeError) as e:
            errors.append(f"{where}: {e} {shown}")
    return errors


def cross_field_errors(cfg: "Config") -> list[str]:
    """Settings that validate one by one but cannot work together; each names its key."""
    errors = []
    c, e = cfg.chunk, cfg.embed
    need = c.chunk_tokens + c.context_tokens + SPECIAL_TOKENS
    from transforms.ingest.profiles import named_profile
    max_length = e.max_length or named_profile(e.profile).profile.max_length
    if need > max_length:
        errors.append(f"chunk.chunk_tokens: chunk_tokens {c.chunk_tokens} + context_tokens {c.context_tokens} "
                      f"+ {SPECIAL_TOKENS} special tokens = {need} exceeds embed.max_length {max_length} "
                      "(chunks would be cut or every document dead-lettered)")
    if c.overlap_tokens >= c.chunk_tokens:
        errors.append(f"chunk.overlap_tokens: {c.overlap_tokens} must be smaller than chunk.chunk_tokens "
                      f"{c.chunk_tokens}")
    if cfg.gate is not None and "://" not in cfg.gate.dataset and not os.path.isdir(cfg.gate.dataset):
        errors.append(f"gate.dataset: directory not found: {cfg.gate.dataset}")
    if cfg.rerank.kind == "cross_encoder" and not cfg.rerank.model_dir:
        errors.append("rerank.model_dir: required when rerank.kind is cross_encoder")
    a = cfg.answer
    if a.kind == "openai":
        for key in ("base_url", "model"):
            if not getattr(a, key):
                errors.append(f"answer.{key}: required when answer.kind is openai")
        if a.base_url and not re.match(r"https?://[^/\s]+", a.base_url):
            from transforms.common.redact import mask_url
            errors.append(f"answer.base_url: expected http(s)://host[:port]/... (got {mask_url(a.base_url)!r})")
    if a.kind == "bedrock" and not a.model:
        errors.append("answer.model: required when answer.kind is bedrock (a Bedrock model id)")
    users = [name for name, used in (("contextualize.kind: llm", cfg.contextualize.kind == "llm"),
                                     (f"rewrite.kind: {cfg.rewrite.kind}", cfg.rewrite.kind != "none"),
                                     ("judge", cfg.judge is not None)) if used]
    if users:
        for key in ("base_url", "model"):
            if not getattr(cfg.llm, key):
                errors.append(f"llm.{key}: required by {', '.join(users)}")
    if cfg.llm.base_url and not re.match(r"https?://[^/\s]+", cfg.llm.base_url):
        from transforms.common.redact import mask_url
        errors.append(f"llm.base_url: expected http(s)://host[:port]/... (got {mask_url(cfg.llm.base_url)!r})")
    return errors


def load_config(path: str | os.PathLike | None = None, environ=None) -> Config:
    """Load and validate a YAML config; raise ConfigError naming the bad key."""
    environ = os.environ if environ is None else environ
    source = str(path or DEFAULT_CONFIG)
    from configs.yaml_safe import MAX_CONFIG_BYTES, YamlConfigError, load_yaml
    try:
        with open(source, encoding="utf-8") as f:
            text = f.read(MAX_CONFIG_BYTES + 1)  # never more: the size cap is checked on what was read
        data = load_yaml(text) or {}
    except FileNotFoundError:
        raise ConfigError(f"{source}: config file not found") from None
    except YamlConfigError as e:
        raise ConfigError(f"{source}: {e}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{source}: not valid YAML: {e}") from None
    except RecursionError:
        raise ConfigError(f"{source}: YAML nested too deeply") from None
    except (UnicodeDecodeError, IsADirectoryError, PermissionError) as e:
        raise ConfigError(f"{source}: cannot read the config file: {type(e).__name__}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping of sections at the top level")
    origins: dict = {}  # key path -> the RAGBEAM__ variable that set it
    data = _apply_env_overrides(_expand_env(data, "", environ), environ, origins)
    try:
        cfg = Config.model_validate(data)
    except ValidationError as e:
        raise ConfigError(_format_error(source, e, origins)) from None
    if cfg.embed.model_path and not cfg.embed.model_sha256:
        raise ConfigError(f"{_origin('embed.model_path', source, origins)}: embed.model_sha256: required when "
                          "embed.model_path is set (every model file is pinned by its sha256)")
    errors = cross_field_errors(cfg) + _check_runner(cfg)
    if errors:
        raise ConfigError("\n".join(f"{_origin(e.split(':', 1)[0], source, origins)}: {e}" for e in errors))
    return cfg
