"""An answer host's copy of an S3 index's segments is checked on every open: a file replaced or
cut after it was verified is downloaded and verified again, never trusted; a segment is fetched
once per host and reused by every version that lists it."""
import json
import os

import numpy as np

import pytest

from tests.integration.test_incremental import s3_config
from transforms.common import storage
from transforms.index import publish
from transforms.index.segment_store import SegmentMismatch, local_segment, segment_files
from transforms.index.segment_stats import dead_df
from transforms.index.segments import Segment


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


def test_the_driver_fetches_only_the_files_it_names_each_verified(s3_segment, tmp_path):
    index, entry = s3_segment
    root = str(tmp_path / "cache")
    names = ["ids.arrow", "terms.arrow", "doc_len.npy"]
    part = segment_files(index, entry["id"], names, entry["meta_sha256"], root=root)
    assert sorted(n for n in os.listdir(part) if not n.startswith(".")) == sorted(["segment.json", *names])
    full = Segment(local_segment(index, entry["id"], entry["meta_sha256"], root=str(tmp_path / "full")))
    seg = Segment(part)
    assert seg.chunk_ids().equals(full.rows.column("chunk_id").combine_chunks())
    assert seg.terms().equals(full.terms()) and list(seg.doc_len) == list(full.doc_len)
    # postings asked for later join the same copy; a dead row's df equals the full copy's
    seg = Segment(segment_files(index, entry["id"], [*names, "post_ptr.npy", "post_doc.npy"], root=root))
    dead = np.array([0, full.n - 1])
    assert (dead_df(seg, dead) == dead_df(full, dead)).all() and dead_df(seg, dead).sum() > 0
    # a partial file cut after it was verified is fetched again
    path = os.path.join(part, "terms.arrow")
    good = storage.sha256_file(path)
    os.truncate(path, os.path.getsize(path) // 2)
    segment_files(index, entry["id"], names, entry["meta_sha256"], root=root)
    assert storage.sha256_file(path) == good
    with pytest.raises(SegmentMismatch, match="sha256 differs from the manifest"):
        segment_files(index, entry["id"], names, "0" * 64, root=str(tmp_path / "other"))


def test_a_host_copy_from_another_build_of_the_same_id_is_fetched_again(s3_segment, mini_index, tmp_path):
    """Ids are content-derived: an older build of the same rows (here: its segment.json lists no
    ids.arrow) has the same id and another segment.json; a copy of one never stands for the other."""
    import shutil
    from transforms.index.segment_store import index_meta_sha256, upload_segment
    index, entry = s3_segment
    root = str(tmp_path / "cache")
    segment_files(index, entry["id"], ["ids.arrow", "terms.arrow"], entry["meta_sha256"], root=root)
    older = tmp_path / "older" / entry["id"]
    shutil.copytree(os.path.join(str(mini_index[0]), "segments", entry["id"]), older)
    meta = json.loads((older / "segment.json").read_text())
    del meta["files"]["ids.arrow"]
    (older / "ids.arrow").unlink()
    (older / "segment.json").write_text(json.dumps(meta))
    upload_segment(str(older), "s3://segcache/older", entry["id"])
    sha = index_meta_sha256("s3://segcache/older", entry["id"])
    assert sha != entry["meta_sha256"]
    got = segment_files("s3://segcache/older", entry["id"], ["ids.arrow", "terms.arrow"], sha, root=root)
    assert storage.sha256_file(os.path.join(got, "segment.json")) == sha
    assert not os.path.exists(os.path.join(got, "ids.arrow"))  # the older build has none: rows.arrow instead
    new_ids = Segment(segment_files(index, entry["id"], ["ids.arrow"], entry["meta_sha256"],
                                    root=str(tmp_path / "other"))).chunk_ids()
    old_ids = Segment(segment_files("s3://segcache/older", entry["id"], ["rows.arrow"], sha, root=root)).chunk_ids()
    assert old_ids.equals(new_ids)  # without ids.arrow the driver reads the ids from rows.arrow
