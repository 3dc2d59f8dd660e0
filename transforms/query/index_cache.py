"""A local copy of an index version that lives on object storage, one per worker machine.

DuckDB opens the artifact as a file, so an answer worker copies `index.duckdb` (and the
manifest) of the version it answers from into a local cache dir keyed by version name and
the artifact's sha256, verifies the sha256 against the manifest, and opens it there. The
copy is made once per machine (a file lock serializes the worker processes of one host)
and reused by every later job that answers from the same version. Every open checks the
copy against a fingerprint taken when it was verified (size + sha256 of its first and last
MiB, and its mtime): a copy replaced, written to or cut since is downloaded and verified
again, never trusted.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
from typing import Optional

from transforms.common import storage
from transforms.common.errors import ActionableError
from transforms.common.s3 import is_s3
from transforms.query.answer_stage import AnswerShardFn

ENV_CACHE_DIR = "RAGBEAM_INDEX_CACHE_DIR"
ARTIFACT = "index.duckdb"
MANIFEST = "manifest.json"


class ArtifactMismatch(ActionableError):
    pass


def cache_root() -> str:
    return os.environ.get(ENV_CACHE_DIR) or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "ragbeam", "indexes")


@contextlib.contextmanager
def _host_lock(path: str):
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def local_index_copy(version_uri: str, expected_sha256: Optional[str] = None, root: Optional[str] = None) -> str:
    """version_uri (s3://…/versions/<v>) -> a local dir holding its manifest.json and index.duckdb.

    expected_sha256: the artifact's sha256 as the driver read it from the manifest (None: take the
    manifest's). The local copy is used only once its bytes hash to that value."""
    if not is_s3(version_uri):
        return version_uri
    manifest = json.loads(storage.read_text(storage.join(version_uri, MANIFEST)))
    sha = manifest.get("artifact", {}).get("sha256")
    if expected_sha256 and sha != expected_sha256:
        raise ArtifactMismatch(f"{version_uri}: manifest says artifact sha256 {sha}, the job expected "
                               f"{expected_sha256}")
    if not sha:
        raise ArtifactMismatch(f"{version_uri}: the manifest records no artifact sha256 "
                               "(rebuild it with `ragbeam index` on this version of ragbeam)")
    name = version_uri.rstrip("/").rsplit("/", 1)[-1]
    root = root or cache_root()
    os.makedirs(root, exist_ok=True)
    local = os.path.join(root, f"{name}-{sha[:16]}")
    done = os.path.join(local, ".verified")
    with _host_lock(local + ".lock"):
        if _still_verified(local, done, sha):
            return local
        with contextlib.suppress(FileNotFoundError):
            os.remove(done)  # a stale or replaced copy: verify a fresh download
        os.makedirs(local, exist_ok=True)
        tmp = os.path.join(local, ARTIFACT + ".download")
        storage.download_file(storage.join(version_uri, ARTIFACT), tmp)
        got = storage.sha256_file(tmp)
        if got != sha:
            os.remove(tmp)
            raise ArtifactMismatch(f"{version_uri}/{ARTIFACT}: sha256 {got} != manifest's {sha}")
        os.replace(tmp, os.path.join(local, ARTIFACT))
        storage.write_json(os.path.join(local, MANIFEST), manifest)
        storage.write_json(done, {"sha256": sha, **fingerprint(os.path.join(local, ARTIFACT))})
    return local


EDGE_BYTES = 1 << 20


def fingerprint(path: str) -> dict:
    """Size, mtime and the sha256 of the first and last MiB: cheap enough for every open. A
    write anywhere moves the mtime; a copy put back with its old mtime still has to match
    in size, header and footer (DuckDB keeps its headers in the first blocks)."""
    import hashlib
    st = os.stat(path)
    size = st.st_size
    h = hashlib.sha256()
    with open(path, "rb") as f:
        h.update(f.read(EDGE_BYTES))
        if size > EDGE_BYTES:
            f.seek(max(EDGE_BYTES, size - EDGE_BYTES))
            h.update(f.read(EDGE_BYTES))
    return {"size": size, "mtime_ns": st.st_mtime_ns, "edges_sha256": h.hexdigest()}


def _still_verified(local: str, done: str, sha: str) -> bool:
    try:
        with open(done, encoding="utf-8") as f:
            marker = json.load(f)
        return (isinstance(marker, dict) and marker.get("sha256") == sha
                and {k: marker.get(k) for k in ("size", "mtime_ns", "edges_sha256")} == fingerprint(os.path.join(local, ARTIFACT)))
    except (OSError, ValueError):
        return False  # no marker, an old-style one, or no artifact: verify again


class CachedIndexAnswerShardFn(AnswerShardFn):
    """AnswerShardFn that answers from the local cached copy of a version on object storage."""

    def __init__(self, version_dir: str, cfg, spec, artifact_sha256: Optional[str] = None,
                 progress_every_s: float = 0.0, trace: bool = False):
        super().__init__(version_dir, cfg, spec, progress_every_s=progress_every_s, trace=trace)
        self.artifact_sha256 = artifact_sha256

    def setup(self):
        self.version_dir = local_index_copy(self.version_dir, self.artifact_sha256)
        super().setup()
