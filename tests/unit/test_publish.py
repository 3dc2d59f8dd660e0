"""Versions: published by one pointer switch, readers see complete versions, old ones pruned."""
import os

import pytest

from transforms.index import publish


def stage(index_dir, name):
    d = publish.staging_dir(str(index_dir), name)
    os.makedirs(d)
    with open(os.path.join(d, "manifest.json"), "w") as f:
        f.write("{}")
    return d


def test_publish_switches_the_pointer_only_when_done(tmp_path):
    assert publish.current_version(str(tmp_path)) is None
    stage(tmp_path, "v1")
    assert publish.current_version(str(tmp_path)) is None  # staging is never visible
    publish.publish(str(tmp_path), "v1")
    assert publish.current_version(str(tmp_path)) == "v1"
    assert publish.resolve_index(str(tmp_path)).endswith("versions/v1")
    assert not os.path.exists(tmp_path / "CURRENT.tmp")


def test_prune_keeps_the_newest_and_never_the_live_one(tmp_path):
    for v in ("v1", "v2", "v3", "v4"):
        stage(tmp_path, v)
        publish.publish(str(tmp_path), v)
    assert publish.prune(str(tmp_path), keep=2) == ["v1", "v2"]
    assert sorted(os.listdir(tmp_path / "versions")) == ["v3", "v4"]
    # the live version survives even when it is not among the newest
    (tmp_path / "CURRENT").write_text("v3\n")
    stage(tmp_path, "v5")
    os.rename(publish.staging_dir(str(tmp_path), "v5"), publish.version_dir(str(tmp_path), "v5"))
    publish.prune(str(tmp_path), keep=1)
    assert sorted(os.listdir(tmp_path / "versions")) == ["v3", "v5"]


def test_resolve_index_refuses_what_is_not_an_index(tmp_path):
    with pytest.raises(FileNotFoundError, match="not an index"):
        publish.resolve_index(str(tmp_path))
    (tmp_path / "CURRENT").write_text("missing\n")
    with pytest.raises(FileNotFoundError, match="no complete version"):
        publish.resolve_index(str(tmp_path))


def test_one_writer_per_index(tmp_path):
    with publish.index_lock(str(tmp_path)):
        with pytest.raises(publish.IndexBusyError, match="another run"):
            with publish.index_lock(str(tmp_path)):
                pass
    with publish.index_lock(str(tmp_path)):  # released after the first run
        pass
