"""The query side's records: what a question file yields, what flows between the engine's
stages, and what the answer job writes.

A question file yields `Question | InputError` (one per line, nothing dropped); retrieval
turns chunk rows into `Candidate`s (`Candidate.from_row`, called by version_segments.VersionSegments only), which
the rerankers and answerers take and return; the engine turns each Question into an
`AnswerRecord`; `AnswerRecord.to_row()` is the one conversion to an output line (JSONL or
Parquet).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Optional, Union


@dataclass(frozen=True)
class Question:
    id: str
    question: str
    acl: Optional[list[str]] = None
    filters: Optional[dict[str, Any]] = None
    metadata: Optional[dict[str, Any]] = None
    line: int = 0  # 1-based position in the input, for stable output order

    def to_wire(self) -> tuple:
        """A plain tuple for the shuffle by shard: Beam encodes it in about half the bytes of the
        pickled dataclass, and an in-process runner holds every question of the file that way."""
        return (self.line, self.id, self.question, self.acl, self.filters, self.metadata)

    @classmethod
    def from_wire(cls, t: tuple) -> "Question":
        line, qid, question, acl, filters, metadata = t
        return cls(id=qid, question=question, acl=acl, filters=filters, metadata=metadata, line=line)


@dataclass(frozen=True)
class InputError:
    """A line that could not be read as a question: it goes to the output with the reason."""
    reason: str
    line: int = 0
    id: Optional[str] = None
    question: Optional[str] = None


QuestionOrError = Union[Question, InputError]


@dataclass(frozen=True, slots=True, kw_only=True)
class Candidate:
    """One retrieved chunk on its way through rerank and answer: the chunk row's display
    columns and the scores the stages give it. Never changed in place: a stage that rescores
    or reorders returns new candidates (`dataclasses.replace`)."""
    # the chunk row's display columns (a segment's rows.arrow)
    chunk_no: Optional[int] = None
    chunk_id: Optional[str] = None
    doc_id: Optional[str] = None
    text: Optional[str] = None
    context: Optional[str] = None
    title: Optional[str] = None
    heading_path: Optional[Any] = None
    page: Optional[int] = None
    source_uri: Optional[str] = None
    acl: Optional[Any] = None
    metadata: dict[str, Any] = field(default_factory=dict)
    # scores: score/rank are the current ones (first stage, then the reranker's fused order)
    score: Optional[float] = None
    rank: Optional[int] = None
    first_stage_score: Optional[float] = None
    first_stage_rank: Optional[int] = None
    dense_rank: Optional[int] = None  # None: not in the dense list
    bm25_rank: Optional[int] = None  # None: not in the BM25 list
    rerank_score: Optional[float] = None  # set by every reranker (NoReranker: the first-stage score)
    # scores on a fixed scale (the engine's absolute_scores): cosine with the question, and BM25
    # over the question's best possible BM25 score (1.0: every term at its best in this chunk)
    dense_cosine: Optional[float] = None
    bm25_coverage: Optional[float] = None
    # the chunk's stored vector, when retrieval returned it (the embedding reranker's chunk_weight)
    embedding: Optional[Any] = field(default=None, compare=False, repr=False)

    @classmethod
    def from_row(cls, row: dict) -> "Candidate":
        """The one conversion from a chunk row (its metadata already decoded)."""
        return cls(**row)

    @property
    def final_score(self) -> Optional[float]:
        """The reranker's score when there is one, else the first-stage score."""
        return self.rerank_score if self.rerank_score is not None else self.score


@dataclass
class AnswerRecord:
    id: Optional[str]
    question: Optional[str]
    answer: str = ""
    status: str = "error"  # answered | not_found | unsupported | error
    error: Optional[str] = None
    citations: list[dict] = field(default_factory=list)
    invalid_citations: int = 0
    unsupported_sentences_removed: int = 0  # generated sentences without a valid citation
    unfound_quotes_removed: int = 0  # quoted spans not found in their source
    removed: list[dict] = field(default_factory=list)  # generated sentences removed: {"sentence", "reason"}
    evidence_score: float = 0.0
    confidence: Optional[float] = None  # calibrated: among answers at confidence c, about c are right
    conflicts: list[dict] = field(default_factory=list)  # competing values among the top sources
    retrieved: list[dict] = field(default_factory=list)  # ranked chunks: rank, doc_id, chunk_id, source, score
    retrieved_docs: list[dict] = field(default_factory=list)  # ranked distinct documents: rank, doc_id, score
    index_version: Optional[str] = None
    trace: Optional[dict] = None  # with --trace: each stage's ranking, the context, per-stage ms
    line: int = 0  # input position; not written
    retryable: bool = False  # a backend error (not the question's fault): its shard is answered again by a rerun; not written

    @classmethod
    def failed(cls, qid: Optional[str], question: Optional[str], reason: str, line: int = 0) -> "AnswerRecord":
        return cls(id=qid, question=question, status="error", error=reason, line=line)

    @classmethod
    def from_input_error(cls, e: InputError) -> "AnswerRecord":
        return cls.failed(e.id, e.question, e.reason, e.line)

    def to_row(self) -> dict:
        row = asdict(self)
        row.pop("line")
        row.pop("retryable")
        if row["trace"] is None:
            row.pop("trace")
        return row
