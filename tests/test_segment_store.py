"""An answer host's copy of an S3 index's segments is checked on every open: a file replaced or
cut after it was verified is downloaded and verified again, never trusted; a segment is fetched
once per host and reused by every version that lists it."""
import json
import os

import pytest

from tests.test_incremental import s3_config
from transforms.common import storage
from transforms.index import publish
from transforms.index.segment_store import SegmentMismatch, local_segment


@pytest.fixture(scope="module")
def s3_segment(s3_server, test_config, mini_index):
    """The mini index's segment put on S3 as a worker puts it (segment.json last)."""
    from transforms.common.s3 import export_to_environment, settings_from_config
    from transforms.index.segment_store import upload_segment
    export_to_environment(settings_from_config(s3_config(test_config, s3_server)))
    s3_server.client().create_bucket(Bucket="segcache")
    manifest = json.loads(open(os.path.join(publish.resolve_index(str(mini_index[0])), "manifest.json")).read())
    entry = manifest["segments"][0]
    upload_segment(os.path.join(str(mini_index[0]), "segments", entry["id"]), "s3://segcache/index", entry["id"])
    return "s3://segcache/index", entry


@pytest.mark.parametrize("tamper", ["replace_same_size", "truncate", "append", "broken_marker"])
def test_a_tampered_cached_copy_is_downloaded_again(s3_segment, tmp_path, tamper):
    index, entry = s3_segment
    root = str(tmp_path / "cache")
    local = local_segment(index, entry["id"], entry["meta_sha256"], root=root)
    path = os.path.join(local, "vectors.npy")
    good = storage.sha256_file(path)
    size = os.path.getsize(path)
    if tamper == "replace_same_size":
        with open(path, "r+b") as f:
            f.seek(size // 2)
            f.write(b"\xff" * 100)
    elif tamper == "truncate":
        os.truncate(path, size // 2)
    elif tamper == "append":
        with open(path, "ab") as f:
            f.write(b"junk")
    else:
        with open(os.path.join(local, ".verified"), "w") as f:
            f.write("old-style marker\n")
    assert storage.sha256_file(path) != good or tamper == "broken_marker"
    again = local_segment(index, entry["id"], entry["meta_sha256"], root=root)
    assert again == local and storage.sha256_file(path) == good


def test_an_untouched_copy_is_not_downloaded_again(s3_segment, tmp_path):
    index, entry = s3_segment
    root = str(tmp_path / "cache")
    path = os.path.join(local_segment(index, entry["id"], entry["meta_sha256"], root=root), "vectors.npy")
    before = os.stat(path).st_mtime_ns
    local_segment(index, entry["id"], entry["meta_sha256"], root=root)
    assert os.stat(path).st_mtime_ns == before


def test_a_segment_whose_meta_differs_from_the_manifest_is_refused(s3_segment, tmp_path):
    index, entry = s3_segment
    with pytest.raises(SegmentMismatch, match="sha256 differs from the manifest"):
        local_segment(index, entry["id"], "0" * 64, root=str(tmp_path / "cache"))
