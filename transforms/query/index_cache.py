"""A local copy of an index version that lives on object storage, one per worker machine.

DuckDB opens the artifact as a file, so an answer worker copies `index.duckdb` (and the
manifest) of the version it answers from into a local cache dir keyed by version name and
the artifact's sha256, verifies the sha256 against the manifest, and opens it there. The
copy is made once per machine (a file lock serializes the worker processes of one host)
and reused by every later job that answers from the same version.
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
        if os.path.exists(done):
            return local
        os.makedirs(local, exist_ok=True)
        tmp = os.path.join(local, ARTIFACT + ".download")
        storage.download_file(storage.join(version_uri, ARTIFACT), tmp)
        got = storage.sha256_file(tmp)
        if got != sha:
            os.remove(tmp)
            raise ArtifactMismatch(f"{version_uri}/{ARTIFACT}: sha256 {got} != manifest's {sha}")
        os.replace(tmp, os.path.join(local, ARTIFACT))
        storage.write_json(os.path.join(local, MANIFEST), manifest)
        storage.write_text(done, sha + "\n")
    return local


class CachedIndexAnswerShardFn(AnswerShardFn):
    """AnswerShardFn that answers from the local cached copy of a version on object storage."""

    def __init__(self, version_dir: str, cfg, spec, artifact_sha256: Optional[str] = None,
                 progress_every_s: float = 0.0, trace: bool = False):
        super().__init__(version_dir, cfg, spec, progress_every_s=progress_every_s, trace=trace)
        self.artifact_sha256 = artifact_sha256

    def setup(self):
        self.version_dir = local_index_copy(self.version_dir, self.artifact_sha256)
        super().setup()
