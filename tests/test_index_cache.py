"""The answer workers' local copy of an S3 index's artifact is checked on every open: a copy
replaced or cut after it was verified is downloaded and verified again, never trusted."""
import os

import pytest

from pipelines.index import run_index
from tests.conftest import SAMPLES
from tests.test_incremental import TINY, quiet, s3_config
from transforms.common import storage
from transforms.index import publish
from transforms.query.index_cache import ARTIFACT, local_index_copy


@pytest.fixture(scope="module")
def s3_version(s3_server, test_config):
    c = s3_server.client()
    c.create_bucket(Bucket="idxcache")
    for rel in TINY:
        c.upload_file(str(SAMPLES / rel), "idxcache", f"docs/{rel}")
    run_index(s3_config(test_config, s3_server), "s3://idxcache/docs", "s3://idxcache/index", progress=False, log=quiet)
    return publish.resolve_index("s3://idxcache/index")


@pytest.mark.parametrize("tamper", ["replace_same_size", "truncate", "append", "delete_marker_fields"])
def test_a_tampered_cached_copy_is_downloaded_again(s3_version, tmp_path, tamper):
    root = str(tmp_path / "cache")
    local = local_index_copy(s3_version, root=root)
    artifact = os.path.join(local, ARTIFACT)
    good = storage.sha256_file(artifact)
    size = os.path.getsize(artifact)
    if tamper == "replace_same_size":
        with open(artifact, "r+b") as f:  # the same size, other bytes in the middle
            f.seek(size // 2)
            f.write(b"\xff" * 100)
    elif tamper == "truncate":
        os.truncate(artifact, size // 2)
    elif tamper == "append":
        with open(artifact, "ab") as f:
            f.write(b"junk")
    else:
        with open(os.path.join(local, ".verified"), "w") as f:
            f.write("old-style marker\n")
    assert storage.sha256_file(artifact) != good or tamper == "delete_marker_fields"
    again = local_index_copy(s3_version, root=root)
    assert again == local and storage.sha256_file(artifact) == good


def test_an_untouched_copy_is_not_downloaded_again(s3_version, tmp_path):
    root = str(tmp_path / "cache")
    artifact = os.path.join(local_index_copy(s3_version, root=root), ARTIFACT)
    before = os.stat(artifact).st_mtime_ns
    local_index_copy(s3_version, root=root)
    assert os.stat(artifact).st_mtime_ns == before
