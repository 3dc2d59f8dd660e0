"""An index run with index.ann: hnsw builds each segment's HNSW graph (in its files and sha256s),
retrieve.mode ann answers as exact search does where efSearch covers the segment, and changing the
ANN settings makes the next index run build its segments again under new ids."""
from __future__ import annotations

import json
import shutil

import pytest

from tests.conftest import copy_corpus
from tests.integration.test_segments import _cfg, _engine, _manifest, _records



def _ann(cfg, mode="ann", ef=4096):
    return cfg.model_copy(update={"retrieve": cfg.retrieve.model_copy(update={"mode": mode, "hnsw_ef_search": ef})})


@pytest.fixture(scope="module")
def hnsw_index(tmp_path_factory, test_config):
    from pipelines.index import run_index
    root = tmp_path_factory.mktemp("ann_index")
    corpus = copy_corpus(root / "corpus")
    cfg = _cfg(test_config, ann="hnsw", hnsw_m=8, hnsw_ef_construction=40)
    idx = root / "idx"
    run_index(cfg, str(corpus), str(idx), progress=False, log=lambda *_: None)
    return idx, corpus, cfg


def test_index_run_builds_a_graph_per_segment_covered_by_its_sha256s(hnsw_index):
    from transforms.index.segments import Segment, verify_files
    idx, _, _ = hnsw_index
    segs = _manifest(idx)["segments"]
    assert segs
    for s in segs:
        seg = Segment(str(idx / "segments" / s["id"]))
        assert seg.has_ann() and seg.meta["ann"]["fingerprint"] == "hnsw-v1:m8:efc40"
        assert "hnsw.faiss" in seg.meta["files"] and verify_files(seg.dir) is None
        assert seg.ann_index().ntotal == seg.n


def test_ann_mode_answers_as_exact_where_ef_covers_the_segment(hnsw_index):
    idx, _, cfg = hnsw_index
    exact = _engine(idx, _ann(cfg, "exact"))
    ann = _engine(idx, _ann(cfg, "ann", 4096))
    try:
        assert all(s.ann_ef_search is None for s in exact.searchers)
        assert all(s.ann_ef_search == 4096 for s in ann.searchers)
        assert json.dumps(_records(ann), sort_keys=True, default=str) == \
            json.dumps(_records(exact), sort_keys=True, default=str)
    finally:
        exact.close()
        ann.close()


def test_changed_ann_settings_rebuild_the_segments(hnsw_index, tmp_path):
    from pipelines.index import run_index
    idx, corpus, cfg = hnsw_index
    d = tmp_path / "idx"
    shutil.copytree(idx, d)
    before = {s["id"] for s in _manifest(d)["segments"]}
    logs = []
    other = _cfg(cfg, ann="hnsw", hnsw_m=12, hnsw_ef_construction=40)
    run_index(other, str(corpus), str(d), progress=False, log=logs.append)
    after = _manifest(d)["segments"]
    assert not {s["id"] for s in after} & before
    assert any("another ANN setting" in str(line) for line in logs)
    from transforms.index.segments import Segment
    assert all(Segment(str(d / "segments" / s["id"])).meta["ann"]["m"] == 12 for s in after)
    # and back to no graph: rebuilt again, segments without hnsw.faiss
    run_index(_cfg(cfg, ann="none"), str(corpus), str(d), progress=False, log=lambda *_: None)
    assert all(not Segment(str(d / "segments" / s["id"])).has_ann() for s in _manifest(d)["segments"])
