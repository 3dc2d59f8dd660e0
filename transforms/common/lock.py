"""Exclusive, non-blocking run locks (flock): a second run on the same target fails at once.

The kernel drops the lock when the process dies, so a killed run never leaves a stale lock.
"""
from __future__ import annotations

import contextlib
import fcntl
import os


class BusyError(RuntimeError):
    pass


@contextlib.contextmanager
def exclusive_lock(lock_path: str, what: str):
    parent = os.path.dirname(lock_path)
    if parent:
        os.makedirs(parent, exist_ok=True)
    fd = os.open(lock_path, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise BusyError(f"{what} is being written by another run (lock {lock_path})") from None
        yield
    finally:
        os.close(fd)
