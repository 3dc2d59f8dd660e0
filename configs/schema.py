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
from pydantic import BaseModel, ConfigDict, Field, ValidationError

CONFIG_DIR = Path(__file__).parent
DEFAULT_CONFIG = CONFIG_DIR / "default.yaml"


class ConfigError(ValueError):
    pass


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RunnerConfig(_Strict):
    # DirectRunner/FnApiRunner run in-process and never reach for Prism's download.
    name: Literal["DirectRunner", "FnApiRunner", "DataflowRunner", "FlinkRunner", "SparkRunner",
                  "PortableRunner", "PrismRunner"] = "DirectRunner"
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


class AclRule(_Strict):
    prefix: str  # key prefix under the input root
    groups: list[str]


class ChunkConfig(_Strict):
    chunk_tokens: int = Field(200, ge=16, le=254)
    overlap_tokens: int = Field(32, ge=0, le=128)
    context_tokens: int = Field(40, ge=0, le=128)


class ContextualizeConfig(_Strict):
    kind: Literal["title_path", "none"] = "title_path"


class EmbedConfig(_Strict):
    model_path: Optional[str] = None  # None: the packaged all-MiniLM-L6-v2 int8 ONNX
    model_sha256: Optional[str] = None  # required when model_path is set
    tokenizer_path: Optional[str] = None
    model_id: Optional[str] = None
    max_length: int = Field(256, ge=8, le=512)
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
    shard_rows: int = Field(50000, ge=100)


class RetrieveConfig(_Strict):
    dense_top_n: int = Field(50, ge=1, le=1000)
    bm25_top_n: int = Field(50, ge=1, le=1000)
    mode: Literal["auto", "exact", "hnsw"] = "auto"
    rrf_k: int = Field(60, ge=1)
    dense_weight: float = Field(1.0, ge=0)
    bm25_weight: float = Field(1.0, ge=0)
    fused_top_n: int = Field(30, ge=1, le=1000)


class RerankConfig(_Strict):
    kind: Literal["embedding", "cross_encoder", "none"] = "none"
    model_dir: Optional[str] = None  # for cross_encoder: model.onnx + tokenizer.json
    top_n: int = Field(20, ge=1, le=1000)


class AnswerConfig(_Strict):
    kind: Literal["extractive", "openai", "bedrock"] = "extractive"
    max_sentences: int = Field(3, ge=1, le=20)
    top_chunks: int = Field(5, ge=1, le=50)
    threshold: float = Field(0.55, ge=-1, le=1)
    base_url: Optional[str] = None  # openai-compatible endpoint
    model: Optional[str] = None
    api_key: Optional[str] = Field(None, repr=False)
    region: Optional[str] = None


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
    stage: Literal["bm25", "dense", "hybrid", "reranked"] = "hybrid"
    min: Optional[float] = Field(None, ge=0, le=1)  # absolute floor
    max_drop: Optional[float] = Field(None, ge=0, le=1)  # no worse than the live version by more than this
    max_questions: int = Field(200, ge=1)


class Config(_Strict):
    runner: RunnerConfig = RunnerConfig()
    s3: S3Config = S3Config()
    source: SourceConfig = SourceConfig()
    acl: list[AclRule] = Field(default_factory=list)
    chunk: ChunkConfig = ChunkConfig()
    contextualize: ContextualizeConfig = ContextualizeConfig()
    embed: EmbedConfig = EmbedConfig()
    artifacts: ArtifactConfig = ArtifactConfig()
    index: IndexConfig = IndexConfig()
    retrieve: RetrieveConfig = RetrieveConfig()
    rerank: RerankConfig = RerankConfig()
    answer: AnswerConfig = AnswerConfig()
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


def _apply_env_overrides(data: dict, environ) -> dict:
    for name, value in environ.items():
        if not name.startswith("RAGBEAM__"):
            continue
        path = [p.lower() for p in name[len("RAGBEAM__"):].split("__") if p]
        node = data
        for part in path[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"{name}: {'.'.join(path)} does not name a config key")
        node[path[-1]] = yaml.safe_load(value) if value.strip() else value
    return data


def _format_error(source: str, err: ValidationError) -> str:
    lines = []
    for e in err.errors():
        key = ".".join(str(p) for p in e["loc"]) or "(top level)"
        if e["type"] == "extra_forbidden":
            msg = "unknown key"
        else:
            msg = e["msg"]
            if "input" in e and e["type"] != "missing":
                msg += f" (got {e['input']!r})"
        lines.append(f"{source}: {key}: {msg}")
    return "\n".join(lines)


def load_config(path: str | os.PathLike | None = None, environ=None) -> Config:
    """Load and validate a YAML config; raise ConfigError naming the bad key."""
    environ = os.environ if environ is None else environ
    source = str(path or DEFAULT_CONFIG)
    try:
        with open(source, encoding="utf-8") as f:
            data = yaml.safe_load(f) or {}
    except FileNotFoundError:
        raise ConfigError(f"{source}: config file not found") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{source}: not valid YAML: {e}") from None
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
    return cfg
