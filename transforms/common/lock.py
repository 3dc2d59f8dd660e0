"""Exclusive, non-blocking run locks: a second run on the same target fails at once.

Local paths: flock (the kernel drops it when the process dies, so a killed run never leaves a
stale lock). s3:// paths: a leased lock object (S3Lease) that a killed run's successor takes
over once the lease has expired.
"""
from __future__ import annotations

import contextlib
import datetime
import fcntl
import math
import os
import secrets
import threading
from typing import Optional

from transforms.common import storage
from transforms.common.errors import ActionableError
from transforms.common.s3 import is_s3


class BusyError(RuntimeError):
    pass


@contextlib.contextmanager
def exclusive_lock(lock_path: str, what: str, busy: str = "is being written by another run",
                   error=None, lease_s: Optional[float] = None):
    """Hold lock_path for a whole run; a second holder gets `error` ("<what> <busy>") at once.
    Yields the S3Lease on object storage (its check() says whether the lease was lost), else None."""
    error = error or BusyError
    if is_s3(lock_path):
        lease = S3Lease(lock_path, f"{what} {busy}", lease_s or lease_from_environment(), error)
        lease.acquire()
        try:
            yield lease
        finally:
            lease.release()
        return
    parent = os.path.dirname(lock_path)
    if parent:
        os.makedirs(parent, exist_ok=True)
    fd = os.open(lock_path, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise error(f"{what} {busy} (lock {lock_path})") from None
        yield None
    finally:
        os.close(fd)  # closing releases the lock, also when the process is killed


DEFAULT_LEASE_S = 600.0
ENV_LEASE = "RAGBEAM_INDEX_LOCK_LEASE_S"


class LockSettingError(ActionableError):
    pass


class MalformedLock(ActionableError):
    """The lock object is not one ragbeam wrote: never guess whether it is held."""


def lease_from_environment() -> float:
    raw = os.environ.get(ENV_LEASE)
    if not raw:
        return DEFAULT_LEASE_S
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not math.isfinite(value) or value <= 0:
        raise LockSettingError(f"{ENV_LEASE}={raw[:40]!r}: expected a positive number of seconds "
                               f"(default {DEFAULT_LEASE_S:g})")
    return value


def _lease_expiry(body: bytes, uri: str) -> float:
    """expires_at of a lock object; MalformedLock if it is not {..., "expires_at": <seconds>}."""
    import json
    try:
        held = json.loads(body)
    except ValueError:
        held = None
    expires = held.get("expires_at") if isinstance(held, dict) else None
    if isinstance(expires, bool) or not isinstance(expires, (int, float)) or not math.isfinite(expires):
        raise MalformedLock(f"lock {uri} is not a ragbeam lock object (expected JSON with a numeric "
                            "expires_at); if no run is using it, delete it and run again")
    return float(expires)


class LockLost(RuntimeError):
    pass


class S3Lease:
    """A lock object on object storage (INDEX/.lock, <output>.lock): {owner, expires_at}, created with If-None-Match: * (only one
    creator wins), renewed by a heartbeat with If-Match: <our ETag> (only the holder renews), taken
    over with If-Match: <the expired lock's ETag> once its lease has run out (a killed run's lock),
    deleted on release. Expiry is judged on the wall clock of the contender: clocks must agree to
    well within a lease."""

    def __init__(self, uri: str, busy_message: str, lease_s: float, error=None):
        import socket
        self.uri, self.busy_message, self.lease_s = uri, busy_message, lease_s
        self.error = error or BusyError
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        self.etag: Optional[str] = None
        self.lost: Optional[str] = None
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def _body(self) -> bytes:
        import json
        import time
        now = time.time()
        return json.dumps({"owner": self.owner, "renewed_at": now, "expires_at": now + self.lease_s,
                           "lease_s": self.lease_s}).encode()

    def acquire(self) -> None:
        import json
        import time
        self.etag = storage.put_if_absent(self.uri, self._body())
        if self.etag is None:
            got = storage.read_with_etag(self.uri)
            if got is None:  # released in between: one more try
                self.etag = storage.put_if_absent(self.uri, self._body())
            else:
                expires = _lease_expiry(got[0], self.uri)
                if expires > time.time():
                    owner = json.loads(got[0]).get("owner")
                    until = datetime.datetime.fromtimestamp(min(expires, 253402300799), datetime.timezone.utc)
                    raise self.error(
                        f"{self.busy_message}: lock {self.uri} is held by "
                        f"{str(owner)[:100]} until {until:%Y-%m-%d %H:%M:%S} UTC (renewed while it runs; "
                        f"a killed run's lock is taken over when its lease expires)")
                self.etag = storage.put_if_match(self.uri, self._body(), got[1])  # take over the expired lock
            if self.etag is None:
                raise self.error(f"{self.busy_message} (lock {self.uri} changed while we tried to take it)")
        self._thread = threading.Thread(target=self._heartbeat, name="s3-lock-lease", daemon=True)
        self._thread.start()

    def _heartbeat(self) -> None:
        while not self._stop.wait(max(self.lease_s / 3.0, 0.2)):
            try:
                etag = storage.put_if_match(self.uri, self._body(), self.etag)
            except Exception:  # a network blip: try again at the next beat, the lease still runs
                continue
            if etag is None:
                self.lost = f"lock {self.uri} was taken over by another run (our lease ran out)"
                return
            self.etag = etag

    def check(self) -> None:
        """Raise if the lease was lost: called before anything becomes visible."""
        if self.lost:
            raise LockLost(self.lost)

    def release(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=10)
        if self.etag and not self.lost:
            storage.delete_if_match(self.uri, self.etag)
