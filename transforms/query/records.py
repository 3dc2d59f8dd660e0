"""The query side's records: what a question file yields and what the answer job writes.

A question file yields `Question | InputError` (one per line, nothing dropped); the
engine turns each Question into an `AnswerRecord`; `AnswerRecord.to_row()` is the one
conversion to an output line (JSONL or Parquet).
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


@dataclass(frozen=True)
class InputError:
    """A line that could not be read as a question: it goes to the output with the reason."""
    reason: str
    line: int = 0
    id: Optional[str] = None
    question: Optional[str] = None


QuestionOrError = Union[Question, InputError]


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
    evidence_score: float = 0.0
    retrieved: list[dict] = field(default_factory=list)  # ranked chunks: rank, doc_id, chunk_id, source, score
    retrieved_docs: list[dict] = field(default_factory=list)  # ranked distinct documents: rank, doc_id, score
    index_version: Optional[str] = None
    trace: Optional[dict] = None  # with --trace: each stage's ranking, the context, per-stage ms
    line: int = 0  # input position; not written

    @classmethod
    def failed(cls, qid: Optional[str], question: Optional[str], reason: str, line: int = 0) -> "AnswerRecord":
        return cls(id=qid, question=question, status="error", error=reason, line=line)

    @classmethod
    def from_input_error(cls, e: InputError) -> "AnswerRecord":
        return cls.failed(e.id, e.question, e.reason, e.line)

    def to_row(self) -> dict:
        row = asdict(self)
        row.pop("line")
        if row["trace"] is None:
            row.pop("trace")
        return row
