"""The index directory on object storage (the real SeaweedFS server): layout, publish, nightly
runs, pruning, the leased writer lock, real kills, and the answer job reading from it."""
import json
import os
import subprocess
import sys
import time

import pytest

from pipelines.index import run_index
from transforms.common import storage
from transforms.index import publish
from transforms.index.incremental import mirror_version
from transforms.index.shards import read_table
from tests.test_incremental import TINY, s3_config, quiet

RUN_COLUMNS = {"indexed_at"}


def rows(version_dir, name, drop=RUN_COLUMNS):
    t = read_table(version_dir, name)
    t = t.select([c for c in t.column_names if c not in drop])
    return sorted(t.to_pylist(), key=lambda r: json.dumps(r, sort_keys=True, default=str))


def local_copy(index_uri, tmp_path, tag):
    return mirror_version(publish.resolve_index(index_uri), str(tmp_path / f"mirror-{tag}"), with_artifact=True)


def keys(s3_server, bucket, prefix):
    c = s3_server.client()
    out = []
    for page in c.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        out += [o["Key"] for o in page.get("Contents", [])]
    return sorted(out)


@pytest.fixture(scope="module")
def s3_source(s3_server):
    from tests.conftest import SAMPLES
    c = s3_server.client()
    try:
        c.create_bucket(Bucket="s3index")
    except Exception:
        pass
    for rel in TINY:
        c.upload_file(str(SAMPLES / rel), "s3index", f"docs/{rel}")
    return "s3://s3index/docs"


def test_index_on_s3_publishes_nightly_runs_and_prunes(s3_server, s3_source, test_config, tmp_path):
    from tests.conftest import SAMPLES
    cfg = s3_config(test_config, s3_server)
    cfg = cfg.model_copy(update={"index": cfg.index.model_copy(update={"keep_versions": 1})})
    c = s3_server.client()
    for rel in TINY:
        c.upload_file(str(SAMPLES / rel), "s3index", f"night0/{rel}")
    index2 = "s3://s3index/idx-nightly"
    first = run_index(cfg, "s3://s3index/night0", index2, progress=False, log=quiet)
    assert first["balanced"] and first["added"] == len(TINY)
    v1 = publish.current_version(index2)
    assert v1 == first["version"]
    names = keys(s3_server, "s3index", "idx-nightly/")
    assert "idx-nightly/CURRENT" in names and "idx-nightly/.lock" not in names  # released
    assert not [k for k in names if k.startswith("idx-nightly/staging/")]
    vkeys = [k[len(f"idx-nightly/versions/{v1}/"):] for k in names if k.startswith(f"idx-nightly/versions/{v1}/")]
    for expected in ("index.duckdb", "manifest.json", "summary.json", "sources/sources.parquet"):
        assert expected in vkeys, (expected, vkeys)
    assert any(k.startswith("chunks/part-") for k in vkeys) and any(k.startswith("documents/") for k in vkeys)
    assert not any(k.startswith(("_plan/", "sources_read/", "embeddings_new/")) or "_temporary" in k for k in vkeys)
    # the cache got the new vectors, named after their (published) version
    cache = [k for k in names if k.startswith("idx-nightly/cache/embeddings/")]
    assert cache and all(os.path.basename(k).startswith(v1) for k in cache)
    # the manifest records the artifact's sha256
    mirror = local_copy(index2, tmp_path, "1")
    manifest = json.loads(open(os.path.join(mirror, "manifest.json")).read())
    assert manifest["artifact"]["sha256"] == storage.sha256_file(os.path.join(mirror, "index.duckdb"))

    # tonight: one changed, one deleted, one added, one copied to a new path
    changed = (SAMPLES / "nodejs/api/punycode.md").read_text() + "\n\n## Added tonight\n\nA new paragraph.\n"
    c.put_object(Bucket="s3index", Key="night0/nodejs/api/punycode.md", Body=changed.encode())
    c.delete_object(Bucket="s3index", Key="night0/git/git-version.txt")
    c.upload_file(str(SAMPLES / "man/man1/ldd.1"), "s3index", "night0/man/man1/ldd.1")
    c.upload_file(str(SAMPLES / "man/man3/fnmatch.3"), "s3index", "night0/zz-copy/fnmatch.3")
    second = run_index(cfg, "s3://s3index/night0", index2, progress=False, log=quiet)
    assert second["balanced"], second
    assert (second["added"], second["changed"], second["removed"]) == (2, 1, 1)
    assert second["read"] == 3 and second["parsed"] == 2 and second["carried_read"] == 1
    assert second["carried_documents"] > 0 and second["cache_hits"] > 0
    assert second["embedded"] < second["chunks"]
    assert second["pruned"] and publish.list_versions(index2) == [second["version"]]  # keep_versions: 1

    # the same state indexed from scratch into a local index: same rows
    scratch = run_index(cfg, "s3://s3index/night0", str(tmp_path / "scratch"), progress=False, log=quiet)
    m2 = local_copy(index2, tmp_path, "2")
    local = publish.resolve_index(str(tmp_path / "scratch"))
    for name in ("chunks", "documents", "dead_letters"):
        assert rows(m2, name) == rows(local, name), name
    sources = {r["uri"]: r for r in rows(m2, "sources")}
    assert sources["s3://s3index/night0/git/git-version.txt"]["status"] == "tombstoned"
    assert scratch["embedded"] == scratch["chunks"]

    # nothing changed: nothing read, parsed or embedded
    third = run_index(cfg, "s3://s3index/night0", index2, progress=False, log=quiet)
    assert (third["read"], third["parsed"], third["embedded"]) == (0, 0, 0)
