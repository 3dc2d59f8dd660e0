"""An index folder without an index run: readers' leases keep their version from the pruner, a
read-only index is still answered, a folder that is not an index is refused untouched, and what
a killed first run left is still an index."""
from __future__ import annotations

import json
import os
import time

import pytest

from pipelines.cli import main
from transforms.index import layout, publish


def _one_line(err: str) -> str:
    lines = [x for x in err.splitlines() if x.strip() and not x.startswith("WARNING")]
    assert len(lines) == 1, err
    return lines[0]


FOREIGN = [["staging/draft.txt"], ["segments/clips/c1.txt"], ["notes.txt"], ["versions/v1.txt"],
           ["staging/draft.txt", "segments/clips/c1.txt"], ["cache/mine.bin", "segments/x.txt"]]


def test_pruning_never_removes_a_leased_version_local(tmp_path):
    for v in ("v1", "v2", "v3"):
        d = publish.staging_dir(str(tmp_path), v)
        os.makedirs(d)
        open(os.path.join(d, "manifest.json"), "w").write("{}")
        publish.publish(str(tmp_path), v)
    with layout.pinned(str(tmp_path), "v1"):
        assert publish.prune(str(tmp_path), keep=1) == ["v2"]
        assert publish.list_versions(str(tmp_path)) == ["v1", "v3"]
    assert publish.prune(str(tmp_path), keep=1) == ["v1"]
    # a killed reader's lease runs out; an expired one is dropped by the pruner
    d = os.path.join(str(tmp_path), "leases", "v3")
    os.makedirs(d, exist_ok=True)
    stale = os.path.join(d, "0123456789abcdef.json")
    json.dump({"expires_at": time.time() - 1}, open(stale, "w"))
    assert layout.leased_versions(str(tmp_path), drop_stale=True) == set() and not os.path.exists(stale)


def test_a_read_only_index_is_still_answered_unpinned(tmp_path, monkeypatch):
    """A reader that cannot write its lease (a read-only mount) still reads; it is only unpinned."""
    d = publish.staging_dir(str(tmp_path), "v1")
    os.makedirs(d)
    open(os.path.join(d, "manifest.json"), "w").write("{}")
    publish.publish(str(tmp_path), "v1")

    def refuse(*a, **k):
        raise PermissionError(13, "Read-only file system")
    monkeypatch.setattr(layout.storage, "write_json", refuse)
    vdir, lease = publish.pin_current(str(tmp_path))
    assert vdir.endswith("versions/v1") and lease.uri is None
    lease.release()


@pytest.mark.parametrize("files", FOREIGN)
def test_output_that_is_not_an_index_is_refused(mini_corpus, tmp_path, capsys, files):
    out = tmp_path / "out"
    for rel in files:
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_text("user data")
    before = sorted(str(p.relative_to(out)) for p in out.rglob("*"))
    rc = main(["index", "--input", str(mini_corpus), "--output", str(out), "--quiet"])
    line = _one_line(capsys.readouterr().err)
    assert rc == 2 and "not an index" in line and str(out) in line
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*")) == before  # not even a lock file
    for rel in files:
        assert (out / rel).read_text() == "user data"


def test_what_a_killed_first_run_left_is_an_index(tmp_path):
    """Only index entries (no CURRENT yet): accepted, as are a new and an empty folder."""
    out = tmp_path / "out"
    layout.refuse_foreign_output(str(out))
    out.mkdir()
    layout.refuse_foreign_output(str(out))
    for rel in ("staging/20261204T101010Z-abcdef/chunks/part.parquet", "segments/" + "a" * 32 + "/rows.arrow",
                "segments/" + "b" * 32 + ".tmp-123/x.npy", "cache/embeddings/ns/x.parquet", ".lock"):
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_text("")
    layout.refuse_foreign_output(str(out))
    assert layout.unexpected_entries(str(out)) == []
    (out / "staging" / "draft.txt").write_text("mine")
    with pytest.raises(layout.ForeignOutputError, match="staging/draft.txt"):
        layout.refuse_foreign_output(str(out))
