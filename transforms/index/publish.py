"""Index versions: staged, published by one atomic pointer switch, pruned.

INDEX/CURRENT names the live version; INDEX/versions/<v>/ holds a complete
version; INDEX/staging/<v>/ is work in progress that readers never look at.
A version becomes visible only by os.replace of CURRENT, after its files are
written and fsynced, so readers always see one complete version.

On object storage (INDEX = s3://bucket/prefix) the layout is the same. Publishing
copies staging/<v>/ to versions/<v>/ server-side, manifest.json last (a version
prefix without a manifest is not a version), then PUTs CURRENT (a single PUT is
atomic) and only then drops the staging prefix. The writer lock is a leased lock
object, see `index_lock`.
"""
from __future__ import annotations

import contextlib
import datetime
import os
import secrets
import shutil
from typing import Optional

from transforms.common import storage
from transforms.common.lock import BusyError, exclusive_lock
from transforms.common.fault_injection import kill_point
from transforms.common.s3 import is_s3

CURRENT = "CURRENT"
VERSIONS = "versions"
STAGING = "staging"


def new_version_name(now: Optional[datetime.datetime] = None) -> str:
    now = now or datetime.datetime.now(datetime.timezone.utc)
    return now.strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(3)


def staging_dir(index_dir: str, version: str) -> str:
    return storage.join(index_dir, STAGING, version)


def version_dir(index_dir: str, version: str) -> str:
    return storage.join(index_dir, VERSIONS, version)


def current_version(index_dir: str) -> Optional[str]:
    if is_s3(index_dir):
        got = storage.read_with_etag(storage.join(index_dir, CURRENT))
        name = got[0].decode("utf-8").strip() if got else ""
        return name if name and storage.exists(storage.join(version_dir(index_dir, name), "manifest.json")) else None
    try:
        with open(os.path.join(index_dir, CURRENT), encoding="utf-8") as f:
            name = f.read().strip()
    except FileNotFoundError:
        return None
    return name if name and os.path.isdir(version_dir(index_dir, name)) else None


def resolve_index(path: str) -> str:
    """An index dir (follows CURRENT) or a version dir -> the version dir to read."""
    if is_s3(path):
        path = path.rstrip("/")
        if storage.exists(storage.join(path, CURRENT)):
            name = current_version(path)
            if name is None:
                raise FileNotFoundError(f"{path}: CURRENT names no complete version")
            return version_dir(path, name)
        if storage.exists(storage.join(path, "manifest.json")):
            return path
        raise FileNotFoundError(f"{path}: not an index (no CURRENT) nor an index version (no manifest.json)")
    if os.path.exists(os.path.join(path, CURRENT)):
        name = current_version(path)
        if name is None:
            raise FileNotFoundError(f"{path}: CURRENT names no complete version")
        return version_dir(path, name)
    if os.path.exists(os.path.join(path, "manifest.json")):
        return path
    raise FileNotFoundError(f"{path}: not an index (no CURRENT) nor an index version (no manifest.json)")


def _fsync_tree(path: str) -> None:
    for root, _, files in os.walk(path):
        for name in files:
            with open(os.path.join(root, name), "rb") as f:
                os.fsync(f.fileno())
        fd = os.open(root, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def publish(index_dir: str, version: str) -> str:
    """Move a finished staging dir into versions/ and switch CURRENT to it."""
    if is_s3(index_dir):
        return _publish_s3(index_dir, version)
    src = staging_dir(index_dir, version)
    dst = version_dir(index_dir, version)
    _fsync_tree(src)
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    os.rename(src, dst)
    storage.write_text(os.path.join(index_dir, CURRENT), version + "\n")  # the one atomic switch
    return dst


def _publish_s3(index_dir: str, version: str) -> str:
    src = staging_dir(index_dir, version).rstrip("/") + "/"
    dst = version_dir(index_dir, version)
    files = storage.list_files(src)
    manifest = src + "manifest.json"
    if manifest not in files:
        raise FileNotFoundError(f"{src}: no manifest.json, nothing to publish")
    for uri in [f for f in files if f != manifest] + [manifest]:  # the manifest completes the version
        storage.copy(uri, storage.join(dst, uri[len(src):]))
    kill_point("before_current")  # tests: a real crash between the manifest and CURRENT
    storage.write_text(storage.join(index_dir, CURRENT), version + "\n")  # the one atomic switch
    storage.delete_tree(src)
    return dst


def list_versions(index_dir: str) -> list[str]:
    """Names under versions/ (complete or not), sorted (names sort by time)."""
    if is_s3(index_dir):
        base = storage.join(index_dir, VERSIONS).rstrip("/") + "/"
        return sorted({u[len(base):].split("/", 1)[0] for u in storage.list_files(base)})
    root = os.path.join(index_dir, VERSIONS)
    return sorted(os.listdir(root)) if os.path.isdir(root) else []


def prune(index_dir: str, keep: int) -> list[str]:
    """Delete all but the newest `keep` versions (never the live one) and stale staging dirs."""
    if is_s3(index_dir):
        live = current_version(index_dir)
        names = list_versions(index_dir)
        removed = []
        for name in names[:-keep] if keep < len(names) else []:
            if name != live:
                storage.delete_tree(version_dir(index_dir, name))
                removed.append(name)
        return removed
    live = current_version(index_dir)
    removed = []
    versions_root = os.path.join(index_dir, VERSIONS)
    names = sorted(os.listdir(versions_root)) if os.path.isdir(versions_root) else []
    for name in names[:-keep] if keep < len(names) else []:
        if name != live:
            shutil.rmtree(os.path.join(versions_root, name), ignore_errors=True)
            removed.append(name)
    return removed


class IndexBusyError(BusyError):
    pass


LOCK = ".lock"


@contextlib.contextmanager
def index_lock(index_dir: str, lease_s: Optional[float] = None):
    """An exclusive lock on INDEX/.lock for a whole run: two runs never share a staging dir."""
    with exclusive_lock(storage.join(index_dir, LOCK), index_dir, "is being indexed by another run",
                        IndexBusyError, lease_s) as lease:
        yield lease


def clear_staging(index_dir: str) -> None:
    """Left-overs of killed runs: never visible, safe to drop before a new run."""
    if is_s3(index_dir):
        storage.delete_tree(storage.join(index_dir, STAGING))
        return
    shutil.rmtree(os.path.join(index_dir, STAGING), ignore_errors=True)
