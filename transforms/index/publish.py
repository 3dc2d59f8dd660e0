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
import json
import os
import secrets
import shutil
from typing import Optional

from transforms.common import storage
from transforms.common.errors import ActionableError
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


class ManifestError(ActionableError):
    """A version's manifest.json that cannot be read: one line naming it and what to run."""


def read_manifest(version_dir: str) -> dict:
    """A version's manifest.json, read once; a missing, cut or non-JSON one is ManifestError."""
    path = storage.join(version_dir, "manifest.json")
    try:
        data = json.loads(storage.read_text(path))
    except FileNotFoundError:
        raise ManifestError(f"{path} is missing (the version was removed, or never completed); "
                            "answer from the index folder (it follows CURRENT) or re-index") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise ManifestError(f"{path} is not valid JSON (cut or damaged: {' '.join(str(e).split())[:120]}); "
                            "re-index (`ragbeam index` writes a new version) or point CURRENT at an earlier "
                            "version") from None
    if not isinstance(data, dict):
        raise ManifestError(f"{path} is not a ragbeam manifest (a JSON {type(data).__name__}); re-index")
    return data


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
    """The versions under versions/ (complete or not), sorted (names sort by time). Entries no
    run wrote (a stray `versions/v1.txt`, a folder without a manifest) are not versions: they
    are ignored here and never pruned (transforms/index/layout.py reports them)."""
    from transforms.index import layout
    return layout.s3_versions(index_dir) if is_s3(index_dir) else layout.local_versions(index_dir)


def prune(index_dir: str, keep: int, log=None) -> list[str]:
    """Delete all but the newest `keep` versions: never the live one, never one a reader holds a
    lease on (transforms/index/layout.py VersionLease), never an entry no run wrote. Locally a
    version is renamed away first and its leases looked at again after the rename: a reader
    that pinned it meanwhile gets it back whole."""
    from transforms.index import layout
    live = current_version(index_dir)
    names = list_versions(index_dir)
    candidates = [n for n in (names[:-keep] if keep < len(names) else []) if n != live]
    if not candidates:
        return []
    held = layout.leased_versions(index_dir, drop_stale=True)
    removed = []
    for name in candidates:
        if name in held:
            if log:
                log(f"ragbeam: version {name} kept: a running reader holds a lease on it")
            continue
        if is_s3(index_dir):
            marker = storage.join(version_dir(index_dir, name), layout.PRUNING_MARKER)
            storage.write_text(marker, "being pruned\n")
            if name in layout.leased_versions(index_dir):  # pinned between the first look and the marker
                storage.delete(marker)
                if log:
                    log(f"ragbeam: version {name} kept: a running reader holds a lease on it")
                continue
            storage.delete_tree(version_dir(index_dir, name).rstrip("/") + "/")
            removed.append(name)
            continue
        versions_root = os.path.join(index_dir, VERSIONS)
        doomed = os.path.join(versions_root, layout.PRUNING_PREFIX + name)
        try:
            os.rename(os.path.join(versions_root, name), doomed)
        except OSError:
            continue
        if name in layout.leased_versions(index_dir):  # pinned between the first look and the rename
            os.rename(doomed, os.path.join(versions_root, name))
            continue
        shutil.rmtree(doomed, ignore_errors=True)
        removed.append(name)
    return removed


def drop_pruning_leftovers(index_dir: str) -> None:
    """versions/.pruning-<v> of a pruner killed mid-delete: the version was already gone."""
    from transforms.index import layout
    root = os.path.join(index_dir, VERSIONS)
    if is_s3(index_dir) or not os.path.isdir(root):
        return
    for name in os.listdir(root):
        if name.startswith(layout.PRUNING_PREFIX):
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)


def pin_current(path: str, attempts: int = 5):
    """(version_dir, lease) for an index dir (its CURRENT) or a version dir inside an index: the
    lease is taken before the version is checked, so a pruner that looked before us sees it, and
    one that removed the version meanwhile sends us back to CURRENT. The caller releases the lease."""
    from transforms.index.layout import VersionLease, version_parent
    last: Optional[Exception] = None
    for _ in range(attempts):
        vdir = resolve_index(path)
        index_dir, version = version_parent(vdir)
        lease = VersionLease(index_dir, version) if index_dir else None
        if lease is not None:
            lease.acquire()
        from transforms.index.layout import PRUNING_MARKER
        if storage.exists(storage.join(vdir, "manifest.json")) and not storage.exists(storage.join(vdir, PRUNING_MARKER)):
            return vdir, lease
        if lease is not None:
            lease.release()
        last = FileNotFoundError(f"{vdir}: the version was removed while it was being opened")
    raise last  # type: ignore[misc]


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
    """Left-overs of killed runs: never visible, safe to drop before a new run. Only staging dirs
    a run made (a version name) go; anything else there is not the index's and stays."""
    from transforms.index import layout
    if is_s3(index_dir):
        base = storage.join(index_dir, STAGING).rstrip("/") + "/"
        names = {u[len(base):].split("/", 1)[0] for u in storage.list_files(base) if "/" in u[len(base):]}
        for name in sorted(n for n in names if layout.is_version_name(n)):
            storage.delete_tree(storage.join(index_dir, STAGING, name))
        return
    root = os.path.join(index_dir, STAGING)
    if not os.path.isdir(root):
        return
    for name in os.listdir(root):
        if layout.is_version_name(name) and os.path.isdir(os.path.join(root, name)):
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)
