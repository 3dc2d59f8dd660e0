"""What belongs in an index directory, what does not, and readers' leases on versions.

An index writes only these entries (docs/index-layout.md):

  CURRENT (+ CURRENT.tmp)  .lock  versions/<v>/  staging/<v>/  segments/<id>/  shards/<table>/  cache/
  leases/<v>/

Anything else (a stray `versions/v1.txt`, a user's `staging/draft.txt`, `segments/clips/`) is not
the index's: `unexpected_entries` reports it before a run does any work, every listing ignores
it and nothing ever deletes it. `refuse_foreign_output` refuses to index into a non-empty folder
that is not an index (no CURRENT) and holds anything an index would not have written.

Readers pin the version they read (publish.pin_current): a VersionLease writes
`leases/<v>/<token>.json` (renewed while the reader runs, deleted when it ends) and the pruner
(publish.prune) never removes a version with an unexpired lease, locally or on object storage.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import socket
import threading
import time
from typing import Optional

from transforms.common import storage
from transforms.common.errors import ActionableError
from transforms.common.s3 import is_s3
from transforms.index.shard_store import SHARDS_DIR, SHARED_TABLES

CURRENT = "CURRENT"
VERSIONS = "versions"
STAGING = "staging"
SEGMENTS = "segments"
SHARDS = SHARDS_DIR  # transforms/index/shard_store.py: shards/<table>/<name>.parquet
SHARD_TABLES = SHARED_TABLES
CACHE = "cache"
LEASES = "leases"
LOCK = ".lock"
TOP_LEVEL = {CURRENT, CURRENT + ".tmp", LOCK, VERSIONS, STAGING, SEGMENTS, SHARDS, CACHE, LEASES}
VERSION_RE = re.compile(r"^\d{8}T\d{6}Z-[0-9a-f]{6}$")  # publish.new_version_name
SEGMENT_RE = re.compile(r"^[0-9a-f]{32}$")  # segments.segment_id
# a segment being written (segments.write_segment) or a host lock beside one
SEGMENT_WORK_RE = re.compile(r"^[0-9a-f]{32}\.(tmp-\d+|lock)$")
PRUNING_PREFIX = ".pruning-"  # a version being removed (renamed first, so a reader never sees half of it)
# On object storage (no atomic rename) a pruner first writes this object into the version, then looks
# at the leases again; a reader first writes its lease, then looks for it: whichever writes second sees
# the other, so a version is never deleted under a reader that pinned it
PRUNING_MARKER = ".pruning"
LEASE_RE = re.compile(r"^[0-9a-f]{16}\.json$")


class ForeignOutputError(ActionableError):
    """--output names a folder that holds things no index wrote."""


# --- what is an index's own ---------------------------------------------------------------------

def is_version_name(name: str) -> bool:
    return bool(VERSION_RE.match(name))


def _local_is_version(root: str, name: str) -> bool:
    path = os.path.join(root, name)
    return (not name.startswith(".") and os.path.isdir(path)
            and (is_version_name(name) or os.path.exists(os.path.join(path, "manifest.json"))))


def local_versions(index_dir: str) -> list[str]:
    """The version dirs under versions/ (a ragbeam version name, or a dir with a manifest), sorted."""
    root = os.path.join(index_dir, VERSIONS)
    names = sorted(os.listdir(root)) if os.path.isdir(root) else []
    return [n for n in names if _local_is_version(root, n)]


def s3_versions(index_dir: str) -> list[str]:
    base = storage.join(index_dir, VERSIONS).rstrip("/") + "/"
    seen: dict[str, bool] = {}
    for u in storage.list_files(base):
        rest = u[len(base):]
        if "/" not in rest:
            continue  # an object directly under versions/: not a version
        name, tail = rest.split("/", 1)
        seen[name] = seen.get(name, False) or tail == "manifest.json"
    return sorted(n for n, has_manifest in seen.items()
                  if not n.startswith(".") and (is_version_name(n) or has_manifest))


def is_segment_dir_name(name: str) -> bool:
    return bool(SEGMENT_RE.match(name))


def unexpected_entries(index_dir: str) -> list[str]:
    """Entries of a local index that no index run wrote, as paths relative to the index (a
    folder's own contents are not listed). Cheap: the top level and one level under versions/,
    staging/ and segments/."""
    if is_s3(index_dir) or not os.path.isdir(index_dir):
        return _s3_unexpected(index_dir) if is_s3(index_dir) else []
    odd: list[str] = []
    for name in sorted(os.listdir(index_dir)):
        if name not in TOP_LEVEL:
            odd.append(name)
    for sub, ok in ((VERSIONS, lambda root, n: _local_is_version(root, n) or n.startswith(PRUNING_PREFIX)),
                    (STAGING, lambda root, n: is_version_name(n) and os.path.isdir(os.path.join(root, n))),
                    (SEGMENTS, lambda root, n: (is_segment_dir_name(n) and os.path.isdir(os.path.join(root, n)))
                     or bool(SEGMENT_WORK_RE.match(n))),
                    (SHARDS, lambda root, n: n in SHARD_TABLES and os.path.isdir(os.path.join(root, n))),
                    (LEASES, lambda root, n: os.path.isdir(os.path.join(root, n)))):
        root = os.path.join(index_dir, sub)
        if not os.path.isdir(root):
            if os.path.exists(root):
                odd.append(sub)
            continue
        odd += [f"{sub}/{n}" for n in sorted(os.listdir(root)) if not ok(root, n)]
    return odd


def _s3_unexpected(index_dir: str, limit: int = 100_000) -> list[str]:
    """The same for an s3:// index, from one listing of the prefix (stops being exhaustive past
    `limit` keys: an index of many segments is mostly segment files, all of them expected)."""
    base = index_dir.rstrip("/") + "/"
    odd: set[str] = set()
    for i, u in enumerate(storage.list_files(base)):
        if i >= limit:
            break
        rel = u[len(base):]
        parts = rel.split("/")
        top = parts[0]
        if top not in TOP_LEVEL:
            odd.add(top)
        elif top in (CURRENT, LOCK, CURRENT + ".tmp"):
            if len(parts) > 1:
                odd.add(top)
        elif len(parts) == 2 and top in (VERSIONS, STAGING, SEGMENTS, SHARDS, LEASES):
            odd.add(rel)  # a file directly under a folder of folders
        elif len(parts) > 2 and top == SHARDS and parts[1] not in SHARD_TABLES:
            odd.add(f"{top}/{parts[1]}")
        elif len(parts) > 2 and top == STAGING and not is_version_name(parts[1]):
            odd.add(f"{top}/{parts[1]}")
        elif len(parts) > 2 and top == SEGMENTS and not is_segment_dir_name(parts[1]):
            odd.add(f"{top}/{parts[1]}")
    return sorted(odd)


def describe_unexpected(odd: list[str], shown: int = 5) -> str:
    more = f" and {len(odd) - shown} more" if len(odd) > shown else ""
    return ", ".join(odd[:shown]) + more


def refuse_foreign_output(index_dir: str) -> None:
    """--output may be a new or empty folder, an index, or what a killed first run left (only
    index entries): a non-empty folder holding anything else is refused, nothing is touched."""
    if is_s3(index_dir):
        if storage.exists(storage.join(index_dir, CURRENT)):
            return
        odd = _s3_unexpected(index_dir)
    else:
        if not os.path.exists(index_dir):
            return
        if not os.path.isdir(index_dir):
            raise ForeignOutputError(f"--output {index_dir}: is a file, not an index folder")
        if os.path.exists(os.path.join(index_dir, CURRENT)):
            return
        odd = unexpected_entries(index_dir)
    if odd:
        raise ForeignOutputError(
            f"--output {index_dir}: not an index (no CURRENT) and not empty ({describe_unexpected(odd)}); "
            "ragbeam never writes into or cleans a folder it did not make: give a new or empty folder, "
            "or an existing index")


# --- readers' leases ----------------------------------------------------------------------------

DEFAULT_READ_LEASE_S = 600.0
ENV_READ_LEASE = "RAGBEAM_READ_LEASE_S"


def read_lease_s() -> float:
    raw = os.environ.get(ENV_READ_LEASE)
    try:
        value = float(raw) if raw else DEFAULT_READ_LEASE_S
    except ValueError:
        value = float("nan")
    if not (value > 0 and value < float("inf")):
        raise ActionableError(f"{ENV_READ_LEASE}={str(raw)[:40]!r}: expected a positive number of seconds "
                              f"(default {DEFAULT_READ_LEASE_S:g})")
    return value


def lease_dir(index_dir: str, version: str) -> str:
    return storage.join(index_dir, LEASES, version)


class VersionLease:
    """leases/<version>/<token>.json: {owner, version, expires_at}, rewritten every lease_s/3 by a
    daemon thread while the reader runs and deleted when it ends; a killed reader's lease runs
    out after lease_s."""

    def __init__(self, index_dir: str, version: str, lease_s: Optional[float] = None):
        self.index_dir, self.version = index_dir, version
        self.lease_s = lease_s or read_lease_s()
        self.uri = storage.join(lease_dir(index_dir, version), secrets.token_hex(8) + ".json")
        self.owner = f"{socket.gethostname()}:{os.getpid()}"
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def _write(self) -> None:
        now = time.time()
        body = {"owner": self.owner, "version": self.version, "renewed_at": now,
                "expires_at": now + self.lease_s, "lease_s": self.lease_s}
        if not is_s3(self.uri):
            os.makedirs(os.path.dirname(self.uri), exist_ok=True)
        storage.write_json(self.uri, body)

    def acquire(self) -> None:
        try:
            self._write()
        except Exception as e:  # a read-only index (mount, bucket policy): answer anyway, unpinned
            import logging
            self.uri = None
            logging.getLogger("ragbeam").warning(
                "could not take a read lease on version %s of %s (%s): a nightly may prune it while this "
                "job runs", self.version, self.index_dir, type(e).__name__)
            return
        self._thread = threading.Thread(target=self._renew, name="ragbeam-read-lease", daemon=True)
        self._thread.start()

    def _renew(self) -> None:
        while not self._stop.wait(max(self.lease_s / 3.0, 0.2)):
            try:
                self._write()
            except Exception:  # a blip: the lease still runs, the next beat tries again
                pass

    def release(self) -> None:
        self._stop.set()
        if self.uri is None:
            return
        if self._thread is not None:
            self._thread.join(timeout=5)
        with contextlib.suppress(Exception):
            storage.delete(self.uri)
        if not is_s3(self.uri):
            with contextlib.suppress(OSError):
                os.rmdir(os.path.dirname(self.uri))  # only when no other reader holds one


def leased_versions(index_dir: str, now: Optional[float] = None, drop_stale: bool = False) -> set[str]:
    """Versions some reader holds an unexpired lease on; `drop_stale` deletes expired leases."""
    now = time.time() if now is None else now
    root = storage.join(index_dir, LEASES)
    if is_s3(index_dir):
        base = root.rstrip("/") + "/"
        files = [u for u in storage.list_files(base) if u[len(base):].count("/") == 1]
    else:
        files = [os.path.join(root, v, f) for v in (sorted(os.listdir(root)) if os.path.isdir(root) else [])
                 if os.path.isdir(os.path.join(root, v)) for f in os.listdir(os.path.join(root, v))]
    held: set[str] = set()
    for uri in files:
        version, name = uri.replace(os.sep, "/").rsplit("/", 2)[-2:]
        if not LEASE_RE.match(name):
            continue  # not a lease file (a temp file being written, or not ours): never deleted
        try:
            expires = float(json.loads(storage.read_text(uri))["expires_at"])
        except FileNotFoundError:
            continue
        except (ValueError, KeyError, TypeError):
            held.add(version)  # unreadable: being written, or not to be judged; keep the version
            continue
        if expires > now:
            held.add(version)
        elif drop_stale:
            with contextlib.suppress(Exception):
                storage.delete(uri)
    return held


@contextlib.contextmanager
def pinned(index_dir: Optional[str], version: Optional[str]):
    """Hold a read lease on INDEX/versions/<version> for the block (nothing when not in an index)."""
    if not index_dir or not version:
        yield None
        return
    lease = VersionLease(index_dir, version)
    lease.acquire()
    try:
        yield lease
    finally:
        lease.release()


def version_parent(version_dir: str) -> tuple[Optional[str], Optional[str]]:
    """(INDEX, version name) for INDEX/versions/<v>; (None, None) for a version dir elsewhere."""
    v = version_dir.rstrip("/")
    parent, name = (v.rsplit("/", 1) if is_s3(v) else os.path.split(os.path.abspath(v)))
    if (parent.rstrip("/").rsplit("/", 1)[-1] if is_s3(parent) else os.path.basename(parent)) != VERSIONS:
        return None, None
    index_dir = parent.rstrip("/").rsplit("/", 1)[0] if is_s3(parent) else os.path.dirname(parent)
    return index_dir, name

