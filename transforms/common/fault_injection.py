"""Fault injection for the crash and reconciliation tests.

Production code calls `kill_point("name")` at the places a crash matters (between
two durable writes); it does nothing unless RAGBEAM_FAULT_KILL_AT names that point.
A stage calls `drop_point("stage", key)` where losing an element silently is the bug the
reconciliation must catch; it is True only for the element RAGBEAM_FAULT_DROP names
("stage:key suffix"). Both read the environment of the process that runs the stage: on a
cluster, the SDK workers' (the worker pool's).
"""
from __future__ import annotations

import os
import signal

ENV = "RAGBEAM_FAULT_KILL_AT"
DROP_ENV = "RAGBEAM_FAULT_DROP"


def kill_point(name: str) -> None:
    if os.environ.get(ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)


def drop_point(stage: str, key: str) -> bool:
    spec = os.environ.get(DROP_ENV)
    if not spec or ":" not in spec:
        return False
    where, suffix = spec.split(":", 1)
    return where == stage and bool(suffix) and key.endswith(suffix)
