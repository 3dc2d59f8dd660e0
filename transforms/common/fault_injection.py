"""Fault injection for the crash tests: kill this process for real at a named point.

Production code calls `kill_point("name")` at the places a crash matters (between
two durable writes); it does nothing unless RAGBEAM_FAULT_KILL_AT names that point.
"""
from __future__ import annotations

import os
import signal

ENV = "RAGBEAM_FAULT_KILL_AT"


def kill_point(name: str) -> None:
    if os.environ.get(ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)
