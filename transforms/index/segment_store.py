"""Where a segment's files are read from: the index itself, or a per-host cache of it.

A local index is read in place (INDEX/segments/<id>/). From object storage each host copies a
segment once into `<cache>/segments/<id>/` (RAGBEAM_INDEX_CACHE_DIR, else ~/.cache/ragbeam/indexes),
verifies every file against the sha256 that segment.json records, and the segment.json against
the sha256 the version's manifest records; every later version listing the same segment id
reuses the copy (segments are immutable), so a nightly costs an answer host only the segments
it lacks. The index driver needs only a segment's ids, vocabulary and lengths (and postings where
it counts tombstones): segment_files copies just those into `<cache>/segment_parts/<id>/`, each
file verified against segment.json, so a driver on a fresh host never downloads vectors or text.
Every open checks the copy against fingerprints taken when it was verified (size,
mtime, sha256 of the first and last MiB of each file). A file lock serialises the worker
processes of one host.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
from typing import Iterable, Optional

from transforms.common import storage
from transforms.common.errors import ActionableError
from transforms.common.s3 import is_s3
from transforms.index.segments import (ENV_CACHE_DIR, META_FILE, SEGMENTS_DIR, cache_root,  # noqa: F401
                                       check_segment, verify_files)

PARTS_DIR = "segment_parts"


class SegmentMismatch(ActionableError):
    pass


def index_of_version(version_dir: str) -> str:
    """INDEX for INDEX/versions/<v> (or INDEX/staging/<v>)."""
    return version_dir.rstrip("/").rsplit("/", 2)[0]


def segment_uri(index_dir: str, sid: str) -> str:
    return storage.join(index_dir, SEGMENTS_DIR, sid)


@contextlib.contextmanager
def _host_lock(path: str):
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def local_segment(index_dir: str, sid: str, meta_sha256: Optional[str] = None,
                  root: Optional[str] = None) -> str:
    """A local directory holding segment `sid` of index_dir, verified when it was copied (or, for
    a local index, against its segment.json: hashed once per host, segments.check_segment)."""
    if not is_s3(index_dir):
        local = segment_uri(index_dir, sid)
        check_segment(local)
        return local
    root = os.path.join(root or cache_root(), SEGMENTS_DIR)
    os.makedirs(root, exist_ok=True)
    local = os.path.join(root, sid)
    done = os.path.join(local, ".verified")
    with _host_lock(local + ".lock"):
        if _still_verified(local, done, meta_sha256):
            return local
        tmp = local + f".download-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        src = segment_uri(index_dir, sid)
        os.makedirs(tmp)
        storage.download_file(storage.join(src, META_FILE), os.path.join(tmp, META_FILE))
        if meta_sha256 and storage.sha256_file(os.path.join(tmp, META_FILE)) != meta_sha256:
            shutil.rmtree(tmp, ignore_errors=True)
            raise SegmentMismatch(f"{src}/{META_FILE}: sha256 differs from the manifest's {meta_sha256}")
        with open(os.path.join(tmp, META_FILE), encoding="utf-8") as f:
            files = json.load(f).get("files", {})
        for name in files:
            storage.download_file(storage.join(src, name), os.path.join(tmp, name))
        problem = verify_files(tmp)
        if problem:
            shutil.rmtree(tmp, ignore_errors=True)
            raise SegmentMismatch(f"{src}: {problem}")
        shutil.rmtree(local, ignore_errors=True)
        os.rename(tmp, local)
        marker = {"meta_sha256": _meta_sha(local),
                  "files": {name: fingerprint(os.path.join(local, name)) for name in [*files, META_FILE]}}
        storage.write_json(done, marker)
    return local


def segment_files(index_dir: str, sid: str, names: Iterable[str], meta_sha256: Optional[str] = None,
                  root: Optional[str] = None) -> str:
    """A local directory holding segment.json and those of `names` the segment has (an older
    segment may lack one), each verified against segment.json: the segment itself for a local
    index (checked whole: segments.check_segment), a full verified copy where this host has one,
    else a partial copy."""
    if not is_s3(index_dir):
        local = segment_uri(index_dir, sid)
        check_segment(local)
        return local
    base = root or cache_root()
    full = os.path.join(base, SEGMENTS_DIR, sid)
    if _still_verified(full, os.path.join(full, ".verified"), meta_sha256):
        return full
    parts = os.path.join(base, PARTS_DIR)
    os.makedirs(parts, exist_ok=True)
    local = os.path.join(parts, sid)
    done = os.path.join(local, ".verified")
    src = segment_uri(index_dir, sid)
    with _host_lock(local + ".lock"):
        have = _verified_files(local, done, meta_sha256)
        if have is None:  # nothing trusted: start over from segment.json
            shutil.rmtree(local, ignore_errors=True)
            os.makedirs(local)
            _fetch_verified(src, META_FILE, local, meta_sha256)
            have = {META_FILE: fingerprint(os.path.join(local, META_FILE))}
        with open(os.path.join(local, META_FILE), encoding="utf-8") as f:
            listed = json.load(f).get("files", {})
        for name in names:
            if name in listed and name not in have:
                _fetch_verified(src, name, local, listed[name])
                have[name] = fingerprint(os.path.join(local, name))
        storage.write_json(done, {"meta_sha256": _meta_sha(local), "files": have})
    return local


def _verified_files(local: str, done: str, meta_sha256: Optional[str]) -> Optional[dict]:
    """The fingerprints of a partial copy's files when all still match, else None."""
    if not _still_verified(local, done, meta_sha256):
        return None
    with open(done, encoding="utf-8") as f:
        return json.load(f)["files"]


def _fetch_verified(src: str, name: str, local: str, sha256: Optional[str]) -> None:
    """src/name -> local/name through a temp file, renamed only once its sha256 matches."""
    tmp = os.path.join(local, f".{name}.download-{os.getpid()}")
    storage.download_file(storage.join(src, name), tmp)
    if sha256 and storage.sha256_file(tmp) != sha256:
        os.remove(tmp)
        what = "the manifest's" if name == META_FILE else f"{META_FILE}'s"
        raise SegmentMismatch(f"{src}/{name}: sha256 differs from {what} {sha256}")
    os.rename(tmp, os.path.join(local, name))


EDGE_BYTES = 1 << 20


def fingerprint(path: str) -> dict:
    """Size, mtime and the sha256 of the first and last MiB: cheap enough for every open. A
    write anywhere moves the mtime; a file put back with its old mtime still has to match in
    size, header and footer."""
    import hashlib
    st = os.stat(path)
    h = hashlib.sha256()
    with open(path, "rb") as f:
        h.update(f.read(EDGE_BYTES))
        if st.st_size > EDGE_BYTES:
            f.seek(max(EDGE_BYTES, st.st_size - EDGE_BYTES))
            h.update(f.read(EDGE_BYTES))
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "edges_sha256": h.hexdigest()}


def _still_verified(local: str, done: str, meta_sha256: Optional[str]) -> bool:
    """Every open checks the copy against the fingerprints taken when it was verified: a file
    replaced, written to or cut since then is downloaded and verified again, never trusted."""
    try:
        with open(done, encoding="utf-8") as f:
            marker = json.load(f)
        if meta_sha256 and marker.get("meta_sha256") != meta_sha256:
            return False
        files = marker["files"]
        return bool(files) and all(fingerprint(os.path.join(local, n)) == fp for n, fp in files.items())
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False  # no marker, a broken one, or a file gone: verify again


def _meta_sha(local: str) -> Optional[str]:
    try:
        return storage.sha256_file(os.path.join(local, META_FILE))
    except OSError:
        return None


def upload_segment(local_dir: str, index_dir: str, sid: str) -> None:
    """A segment built in a local dir -> INDEX/segments/<id>/ on object storage, segment.json
    last (a prefix without it is not a segment)."""
    dst = segment_uri(index_dir, sid)
    if storage.exists(storage.join(dst, META_FILE)):
        return  # content-derived id: already there, the same bytes
    from transforms.common.fault_injection import kill_point
    for i, name in enumerate(n for n in sorted(os.listdir(local_dir)) if n != META_FILE):
        storage.upload_file(os.path.join(local_dir, name), storage.join(dst, name))
        if i == 0:
            kill_point("during_segment_upload")  # tests: a real crash with the segment half uploaded
    storage.upload_file(os.path.join(local_dir, META_FILE), storage.join(dst, META_FILE))


def index_meta_sha256(index_dir: str, sid: str) -> str:
    """The sha256 of the segment.json the index holds for `sid`: what a host copy must match. Ids
    are content-derived, so a copy of the same id made from an older build (another segment.json,
    e.g. before ids.arrow) is told apart by this, never trusted."""
    import hashlib
    return hashlib.sha256(storage.read_bytes(storage.join(segment_uri(index_dir, sid), META_FILE))).hexdigest()


def segment_exists(index_dir: str, sid: str) -> bool:
    return storage.exists(storage.join(segment_uri(index_dir, sid), META_FILE))
