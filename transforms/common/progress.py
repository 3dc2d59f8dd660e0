"""Progress lines for local runs: documents and chunks per second.

On the in-process runner every DoFn lives in this one process, so the parse and
embed stages share one tally, handed out by Beam's `shared` module (the one sanctioned
way for DoFn instances to share state). On a distributed runner each worker has its
own (and progress is off there: use the runner's UI and Beam counters).
"""
from __future__ import annotations

import threading
import time

from apache_beam.utils import shared


class Tally:
    def __init__(self):
        self.started = time.monotonic()
        self.last_line = self.started
        self.counts: dict[str, int] = {}
        self._lock = threading.Lock()

    def note(self, kind: str, n: int = 1) -> None:
        with self._lock:
            self.counts[kind] = self.counts.get(kind, 0) + n

    def line(self) -> str:
        elapsed = max(time.monotonic() - self.started, 1e-9)
        parts = [f"{k} {v} ({v / elapsed:.1f}/s)" for k, v in sorted(self.counts.items())]
        return "  " + ", ".join(parts) + f"  [{elapsed:.0f} s]"

    def due(self, every_s: float) -> bool:
        """True at most once every `every_s` seconds (the caller prints a line then)."""
        now = time.monotonic()
        with self._lock:
            if every_s and now - self.last_line >= every_s:
                self.last_line = now
                return True
        return False


_HANDLE = shared.Shared()


def tally() -> Tally:
    """This process's tally (hold the reference: Shared frees it when nobody does)."""
    return _HANDLE.acquire(Tally, tag="ragbeam-progress")
