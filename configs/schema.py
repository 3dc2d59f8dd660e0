"""The config schema: YAML is validated on load, and a bad line names its key.

Secrets come from the environment: any string value may be written as
`${VAR}` (or `${VAR:-default}`), and `RAGBEAM__SECTION__KEY=value` overrides
one key (e.g. `RAGBEAM__S3__ENDPOINT_URL`).
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Literal, Optional

import yaml
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

CONFIG_DIR = Path(__file__).parent
DEFAULT_CONFIG = CONFIG_DIR / "default.yaml"


class ConfigError(ValueError):
    pass


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RunnerConfig(_Strict):
    # DirectRunner/FnApiRunner run in-process and never reach for Prism's download.
    # Any runner Beam knows by name (DataflowRunner, FlinkRunner, ...) or a fully qualified
    # runner class (my.module.MyRunner); `options` are checked by Beam's own parser at load.
    name: str = "DirectRunner"
    direct_running_mode: Literal["in_memory", "multi_threading", "multi_processing"] = "in_memory"
    direct_num_workers: int = Field(1, ge=1, le=256)
    options: dict[str, Any] = Field(default_factory=dict)  # extra Beam pipeline options, passed as --key=value


class S3Config(_Strict):
    endpoint_url: Optional[str] = None
    region: Optional[str] = None
    access_key_id: Optional[str] = Field(None, repr=False)  # secrets: never in reprs or manifests
    secret_access_key: Optional[str] = Field(None, repr=False)


class SourceConfig(_Strict):
    full_hash: bool = False  # re-hash every object even when size and mtime are unchanged
    max_object_bytes: int = Field(256 * 1024 * 1024, ge=1)
    # Symbolic links whose target lies outside the input root are skipped (and counted) unless set.
    follow_links_outside_root: bool = False
    # Files and folders whose name starts with '.' (.git/, .DS_Store, ..notes.txt) are not
    # indexed but counted (summary `skipped_at_listing.hidden`, with paths) unless this is false.
    skip_hidden: bool = True
    # ACL rule prefixes are matched against the key relative to this root (a folder or an
    # s3:// prefix) when set; unset: against every '/'-boundary suffix of the object's URI.
    root: Optional[str] = None


class ParseConfig(_Strict):
    # PDF pages with no (or almost no) text layer are rendered and read by OCR (rapidocr on
    # onnxruntime). auto: only such pages; force: every page; off: never.
    ocr: Literal["auto", "off", "force"] = "auto"
    ocr_dpi: int = Field(300, ge=72, le=600)  # below ~250 dpi the bundled model drops word spaces
    ocr_min_confidence: float = Field(0.75, ge=0.0, le=1.0)  # a page below this is dead-lettered
    # What one document may inflate to (max_object_bytes bounds only what is read): its text
    # (a JSONL record's, a file's), and a PDF's compressed streams, inflated, all together.
    # Past either it is dead-lettered with the key named (transforms/ingest/parse/limits.py).
    max_text_chars: int = Field(50_000_000, ge=1)
    max_inflated_bytes: int = Field(256 * 1024 * 1024, ge=1)


class DedupeConfig(_Strict):
    # Near-duplicate documents (MinHash + LSH over word shingles, per ACL): a near-copy is not
    # chunked or embedded, its paths join its representative's sources. Measured on debian-docs:
    # at 0.9 with 3-word shingles no wrong merge, 109 HTML/txt twins merged (README-neardup.md).
    near_duplicates: bool = True
    threshold: float = Field(0.9, gt=0.0, le=1.0)  # estimated Jaccard of the shingle sets
    shingle_size: int = Field(3, ge=1, le=20)  # words per shingle
    num_perm: int = Field(128, ge=16, le=1024)  # MinHash permutations (signature: 4 bytes each)


class AclRule(_Strict):
    prefix: str  # key prefix (see source.root for what the key is relative to)
    # At least one group: an empty list would read as "public" downstream, so it is refused.
    groups: list[Annotated[str, StringConstraints(min_length=1, strip_whitespace=True)]] = Field(min_length=1)


class ChunkConfig(_Strict):
    chunk_tokens: int = Field(200, ge=16, le=254)
    overlap_tokens: int = Field(32, ge=0, le=128)
    context_tokens: int = Field(40, ge=0, le=128)


class ContextualizeConfig(_Strict):
    kind: Literal["title_path", "none"] = "title_path"


EmbedProfileName = Literal["minilm", "fast", "minilm-q8", "bge-small", "e5-small"]  # transforms/ingest/profiles.py


class EmbedConfig(_Strict):
    # A named model and its conventions; None: minilm (the packaged all-MiniLM-L6-v2 int8 ONNX;
    # `fast` is its alias). minilm-q8, bge-small and e5-small are installed by `make models`.
    profile: Optional[EmbedProfileName] = None
    model_path: Optional[str] = None  # another BERT-family ONNX export (the profile gives its conventions)
    model_sha256: Optional[str] = None  # required when model_path is set
    tokenizer_path: Optional[str] = None
    model_id: Optional[str] = None
    # Each unset: the profile's. Questions get query_prefix, chunks and sentences passage_prefix.
    pooling: Optional[Literal["mean", "cls"]] = None
    query_prefix: Optional[str] = Field(None, max_length=1000)
    passage_prefix: Optional[str] = Field(None, max_length=1000)
    normalize: Optional[bool] = None
    max_length: Optional[int] = Field(None, ge=8, le=512)
    dim: Optional[int] = Field(None, ge=1, le=65536)  # vector dimension; unset: read from the model
    batch_size: int = Field(8, ge=1, le=1024)
    intra_op_threads: int = Field(0, ge=0, le=256)


class HnswConfig(_Strict):
    m: int = Field(16, ge=2, le=128)
    ef_construction: int = Field(128, ge=8, le=2048)
    ef_search: int = Field(64, ge=8, le=2048)


class ArtifactConfig(_Strict):
    build: bool = True
    hnsw: HnswConfig = HnswConfig()
    recall_sample: int = Field(200, ge=0, le=100000)
    # A question file (JSONL/CSV/Parquet) whose questions probe HNSW recall; unset: the first
    # sentence of `recall_sample` chunks stands in for questions.
    recall_questions: Optional[str] = None


class IndexConfig(_Strict):
    keep_versions: int = Field(3, ge=1, le=1000)


class RetrieveConfig(_Strict):
    dense_top_n: int = Field(50, ge=1, le=1000)
    bm25_top_n: int = Field(50, ge=1, le=1000)
    mode: Literal["auto", "exact", "hnsw"] = "auto"
    rrf_k: int = Field(60, ge=1)
    dense_weight: float = Field(1.0, ge=0)
    bm25_weight: float = Field(1.0, ge=0)
    fused_top_n: int = Field(30, ge=1, le=1000)
    # convex (default): fusion_alpha * dense score + (1 - fusion_alpha) * BM25 score, each
    # normalised by fusion_norm (bound: the cosine as it is, BM25 over the query's best possible
    # score), a chunk missing from one list scored exactly there; rrf: reciprocal rank fusion
    # (rrf_k, dense_weight, bm25_weight). Chosen on the dev sets (README, "Quality").
    fusion: Literal["rrf", "convex"] = "convex"
    fusion_alpha: float = Field(0.82, ge=0, le=1)
    fusion_norm: Literal["minmax", "zscore", "max", "bound"] = "bound"
    bm25_k1: Optional[float] = Field(None, gt=0)  # None: the artifact's (1.2)
    bm25_b: Optional[float] = Field(None, ge=0, le=1)  # None: the artifact's (0.75)


class RerankConfig(_Strict):
    kind: Literal["embedding", "cross_encoder", "none"] = "none"
    model_dir: Optional[str] = None  # for cross_encoder: model.onnx + tokenizer.json
    top_n: int = Field(20, ge=1, le=1000)
    # How the rerank order folds back into the first-stage order; unset: the reranker's own
    # default (rrf for embedding, none for cross_encoder).
    fusion: Optional[Literal["rrf", "blend", "none"]] = None
    top_sentences: int = Field(1, ge=1, le=20)  # embedding: mean of the best N sentence cosines
    chunk_weight: float = Field(0.0, ge=0)  # embedding: weight of the whole chunk's cosine


class AnswerConfig(_Strict):
    kind: Literal["extractive", "openai", "bedrock"] = "extractive"
    max_sentences: int = Field(3, ge=1, le=20)
    top_chunks: int = Field(5, ge=1, le=50)
    # evidence "model": the probability that the chunks answer the question (a logistic model over
    # sentence and retrieval scores, extract.EVIDENCE_MODEL); "sentence": best cosine + lexical share
    evidence: Literal["model", "sentence"] = "model"
    threshold: Optional[float] = Field(None, ge=-1, le=2)  # None: 0.34 for evidence model, 0.58 for sentence
    # extractive sentence selection (transforms/query/extract.py)
    gap: float = Field(0.12, ge=0, le=2)  # keep sentences scoring within this of the best
    # sentences scoring within this of the best are read for competing numbers and dates
    # (the answer's `conflicts`); 0 turns the check off
    conflict_gap: float = Field(0.15, ge=0, le=2)
    lexical_weight: float = Field(0.7, ge=0, le=2)  # share of the question's (idf-weighted) words
    lexical_idf: bool = True  # weigh the question's words by inverse document frequency
    type_weight: float = Field(0.1, ge=0, le=2)  # the sentence holds the asked kind (year, number, name)
    same_source_bonus: float = Field(0.1, ge=0, le=2)  # favour a 2nd sentence from the cited chunk
    evidence_lexical_weight: float = Field(0.5, ge=0, le=2)  # evidence = max(cos + this * lexical)
    rank_weight: float = Field(0.0, ge=0, le=2)  # bonus rank_weight / chunk rank
    mmr_lambda: float = Field(1.0, ge=0, le=1)
    dup_sim: float = Field(0.95, ge=0, le=1)  # drop a sentence this similar to a picked one
    base_url: Optional[str] = None  # openai-compatible endpoint
    model: Optional[str] = None
    api_key: Optional[str] = Field(None, repr=False)
    region: Optional[str] = None
    timeout_s: float = Field(30.0, gt=0, le=3600)  # one request to the generator backend
    retries: int = Field(2, ge=0, le=10)  # extra attempts after a timeout or a retryable HTTP status
    backoff_s: float = Field(1.0, ge=0, le=300)
    # Seconds of generator time one worker may spend in total; after that its remaining
    # questions become error records at once (None: no budget).
    budget_s: Optional[float] = Field(3600.0, gt=0)

    @property
    def evidence_threshold(self) -> float:
        if self.threshold is not None:
            return self.threshold
        return 0.34 if self.evidence == "model" else 0.58


class QuestionsConfig(_Strict):
    # A question line (JSONL line, CSV physical line, Parquet row) over this many bytes is an
    # error record for that line, read with bounded memory; the rest of the file is answered.
    max_line_bytes: int = Field(1024 * 1024, ge=1024, le=1024 * 1024 * 1024)


class OutputConfig(_Strict):
    format: Literal["jsonl", "parquet"] = "jsonl"
    retrieved_top_k: int = Field(10, ge=1, le=100)
    shards: Optional[int] = Field(None, ge=1, le=100000)  # None: one shard per questions_per_shard questions
    questions_per_shard: int = Field(10000, ge=1, le=10000000)
    batch_size: int = Field(64, ge=1, le=100000)


class GateConfig(_Strict):
    """Eval gate: a new version is published only if it passes on a golden set."""
    dataset: str  # BEIR layout: queries.jsonl + qrels/test.tsv; corpus ids are doc ids of the index
    metric: str = "ndcg@10"
    stage: Literal["bm25", "dense", "hybrid", "final", "reranked"] = "hybrid"  # reranked: old name of final
    min: Optional[float] = Field(None, ge=0, le=1)  # absolute floor
    max_drop: Optional[float] = Field(None, ge=0, le=1)  # no worse than the live version by more than this
    max_questions: int = Field(200, ge=1)


class Config(_Strict):
    runner: RunnerConfig = RunnerConfig()
    s3: S3Config = S3Config()
    source: SourceConfig = SourceConfig()
    parse: ParseConfig = ParseConfig()
    dedupe: DedupeConfig = DedupeConfig()
    acl: list[AclRule] = Field(default_factory=list)
    chunk: ChunkConfig = ChunkConfig()
    contextualize: ContextualizeConfig = ContextualizeConfig()
    embed: EmbedConfig = EmbedConfig()
    artifacts: ArtifactConfig = ArtifactConfig()
    index: IndexConfig = IndexConfig()
    retrieve: RetrieveConfig = RetrieveConfig()
    rerank: RerankConfig = RerankConfig()
    answer: AnswerConfig = AnswerConfig()
    questions: QuestionsConfig = QuestionsConfig()
    output: OutputConfig = OutputConfig()
    gate: Optional[GateConfig] = None


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


from transforms.common.redact import SECRET_KEYS, is_secret_path  # noqa: E402,F401  (one list of secrets)


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


def _apply_env_overrides(data: dict, environ) -> dict:
    """RAGBEAM__SECTION__KEY=value. The value is a string, taken as written (no YAML: `abc #def`
    stays whole and `null` stays "null"), unless the key's type is a list, a mapping or a section,
    where it is parsed as YAML/JSON. Numbers and booleans are converted by the schema."""
    for name, value in environ.items():
        if not name.startswith("RAGBEAM__"):
            continue
        path = [p.lower() for p in name[len("RAGBEAM__"):].split("__") if p]
        if not path:
            continue
        node = data
        for part in path[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"{name}: {'.'.join(path)} does not name a config key")
        if _field_wants_structure(path) and value.strip():
            from configs.yaml_safe import YamlConfigError, load_yaml
            try:
                node[path[-1]] = load_yaml(value)
            except YamlConfigError as e:
                raise ConfigError(f"{name}: {'.'.join(path)}: {e}") from None
            except (yaml.YAMLError, RecursionError):
                raise ConfigError(f"{name}: {'.'.join(path)}: not valid YAML/JSON") from None
        else:
            node[path[-1]] = value
    return data


def _format_error(source: str, err: ValidationError) -> str:
    from transforms.common.redact import redact_text
    lines = []
    for e in err.errors():
        key = ".".join(str(p) for p in e["loc"]) or "(top level)"
        if e["type"] == "extra_forbidden":
            msg = "unknown key"
        else:
            msg = e["msg"]
            if "input" in e and e["type"] != "missing":
                if is_secret_path(tuple(e["loc"])):
                    msg += " (value hidden: secret)"
                else:
                    msg += f" (got {redact_text(repr(e['input']))[:200]})"
        lines.append(f"{source}: {key}: {msg}")
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
    from apache_beam.options.pipeline_options import PipelineOptions, _BeamArgumentParser

    errors = []
    parser = _BeamArgumentParser(allow_abbrev=False)
    def all_subclasses(c):
        for sub in c.__subclasses__():
            yield sub
            yield from all_subclasses(sub)
    for cls in set(all_subclasses(PipelineOptions)):
        with contextlib.suppress(Exception):
            cls._add_argparse_args(parser)
    known = {a.dest for a in parser._actions}
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
    rq = cfg.artifacts.recall_questions
    if rq and "://" not in rq and not os.path.isfile(rq):
        errors.append(f"artifacts.recall_questions: file not found: {rq}")
    elif rq:
        lower = rq.lower()
        if not lower.endswith((".jsonl", ".ndjson", ".json", ".csv", ".parquet", ".pq")):
            errors.append(f"artifacts.recall_questions: cannot tell the format of {rq} "
                          "(expected .jsonl, .csv or .parquet)")
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
    data = _apply_env_overrides(_expand_env(data, "", environ), environ)
    try:
        cfg = Config.model_validate(data)
    except ValidationError as e:
        raise ConfigError(_format_error(source, e)) from None
    if cfg.embed.model_path and not cfg.embed.model_sha256:
        raise ConfigError(f"{source}: embed.model_sha256: required when embed.model_path is set "
                          "(every model file is pinned by its sha256)")
    errors = cross_field_errors(cfg) + _check_runner(cfg)
    if errors:
        raise ConfigError("\n".join(f"{source}: {e}" for e in errors))
    return cfg
