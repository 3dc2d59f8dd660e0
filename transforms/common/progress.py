"""Progress lines for local runs: documents and chunks per second.

On the in-process runner every DoFn lives in this one process, so a module-level
tally is shared by the parse and embed stages. On a distributed runner each worker
has its own (and progress is off there: use the runner's UI and Beam counters).
"""
from __future__ import annotations

import time

_counts: dict[str, int] = {}
_start: list[float] = []


def note(kind: str, n: int = 1) -> None:
    if not _start:
        _start.append(time.monotonic())
    _counts[kind] = _counts.get(kind, 0) + n


def line() -> str:
    elapsed = max(time.monotonic() - (_start[0] if _start else time.monotonic()), 1e-9)
    parts = [f"{k} {v} ({v / elapsed:.1f}/s)" for k, v in sorted(_counts.items())]
    return "  " + ", ".join(parts) + f"  [{elapsed:.0f} s]"
