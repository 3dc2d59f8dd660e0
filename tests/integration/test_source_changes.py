"""Source options and changes between runs: max_object_bytes, full_hash, a processing-key
change, and deleting the representative copy of duplicated content."""
import json
import os

from pipelines.index import run_index
from transforms.index import publish
from transforms.index.shards import read_table

A = "Alpha notes.\n\nThe lighthouse keeper records the wind speed every morning at six o'clock.\n"
B = "Beta notes.\n\nThe baker feeds the sourdough starter with rye flour every evening before closing.\n"
C = "Gamma notes.\n\nThe honeybee colony swarms in late spring when the hive becomes crowded.\n"


def quiet(*_):
    pass


def rows(index_dir, name, drop=("indexed_at",)):
    t = read_table(publish.resolve_index(str(index_dir)), name)
    t = t.select([c for c in t.column_names if c not in drop])
    return sorted(t.to_pylist(), key=lambda r: json.dumps(r, sort_keys=True, default=str))


def texts_by_key(index_dir):
    out = {}
    for r in read_table(publish.resolve_index(str(index_dir)), "chunks").to_pylist():
        out.setdefault(json.loads(r["metadata"])["key"], []).append(r["text"])
    return {k: " ".join(v) for k, v in out.items()}


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def with_source(cfg, **kw):
    return cfg.model_copy(update={"source": cfg.source.model_copy(update=kw)})


def test_an_oversize_object_is_dead_lettered_and_the_rest_indexed(test_config, tmp_path):
    src = tmp_path / "src"
    write(src / "small.txt", A)
    write(src / "big.txt", B * 40)  # ~3.6 kB
    cfg = with_source(test_config, max_object_bytes=1000)
    s = run_index(cfg, str(src), str(tmp_path / "idx"), progress=False, log=quiet)
    assert s["balanced"] and (s["listed"], s["parsed"], s["dead_lettered"]) == (2, 1, 1), s
    (dead,) = read_table(publish.resolve_index(str(tmp_path / "idx")), "dead_letters").to_pylist()
    assert dead["source_uri"].endswith("big.txt") and dead["stage"] == "read"
    assert "max_object_bytes=1000" in dead["reason"] and str(len(B * 40)) in dead["reason"]
    assert list(texts_by_key(tmp_path / "idx")) == ["small.txt"]


def test_full_hash_finds_a_change_that_size_and_mtime_hide(test_config, tmp_path):
    src, idx = tmp_path / "src", tmp_path / "idx"
    a, b = write(src / "a.txt", A), write(src / "b.txt", B)
    first = run_index(test_config, str(src), str(idx), progress=False, log=quiet)
    assert first["added"] == 2
    chunks_a = {r["chunk_id"] for r in rows(idx, "chunks") if r["source_uri"].endswith("a.txt")}

    st_a = a.stat()
    os.utime(a, ns=(st_a.st_atime_ns, st_a.st_mtime_ns + 5_000_000_000))  # touched, same bytes
    st_b = b.stat()
    changed = B.replace("rye flour", "oat flour")  # same size...
    assert len(changed) == len(B)
    b.write_text(changed)
    os.utime(b, ns=(st_b.st_atime_ns, st_b.st_mtime_ns))  # ...and the same mtime

    second = run_index(test_config, str(src), str(idx), progress=False, log=quiet)
    assert second["balanced"], second
    # a was re-read and re-hashed (its mtime moved), found unchanged and carried, not re-processed
    assert (second["read"], second["carried_read"], second["parsed"], second["embedded"]) == (1, 1, 0, 0), second
    assert (second["changed"], second["unchanged_not_read"]) == (0, 1)
    assert "rye flour" in texts_by_key(idx)["b.txt"]  # by design: size + mtime said "unchanged"

    third = run_index(with_source(test_config, full_hash=True), str(src), str(idx), progress=False, log=quiet)
    assert third["balanced"], third
    assert (third["read"], third["unchanged_not_read"], third["changed"], third["parsed"]) == (2, 0, 1, 1), third
    text = texts_by_key(idx)["b.txt"]
    assert "oat flour" in text and "rye flour" not in text
    assert {r["chunk_id"] for r in rows(idx, "chunks") if r["source_uri"].endswith("a.txt")} == chunks_a


def test_a_processing_key_change_re_indexes_everything(test_config, tmp_path):
    src, idx = tmp_path / "src", tmp_path / "idx"
    write(src / "a.txt", A)
    write(src / "b.txt", B)
    first = run_index(test_config, str(src), str(idx), progress=False, log=quiet)
    assert first["added"] == 2
    before = {r["chunk_id"] for r in rows(idx, "chunks")}
    manifest_before = json.load(open(os.path.join(publish.resolve_index(str(idx)), "manifest.json")))

    cfg = test_config.model_copy(update={"chunk": test_config.chunk.model_copy(update={"chunk_tokens": 120})})
    second = run_index(cfg, str(src), str(idx), progress=False, log=quiet)  # no file changed
    assert second["balanced"], second
    assert (second["read"], second["unchanged_not_read"], second["parsed"]) == (2, 0, 2), second
    assert (second["carried_documents"], second["carried_chunks"], second["carried_read"]) == (0, 0, 0), second
    manifest = json.load(open(os.path.join(publish.resolve_index(str(idx)), "manifest.json")))
    assert manifest["processing_key"] != manifest_before["processing_key"]
    assert manifest["versions"]["chunker"] != manifest_before["versions"]["chunker"]
    assert before.isdisjoint({r["chunk_id"] for r in rows(idx, "chunks")})  # every chunk was made again


def test_deleting_the_representative_copy_keeps_the_document(test_config, tmp_path):
    src, idx = tmp_path / "src", tmp_path / "idx"
    rep = write(src / "dup" / "a.txt", B)  # the smallest key: the representative copy
    write(src / "dup" / "b.txt", B)
    write(src / "c.txt", C)
    first = run_index(test_config, str(src), str(idx), progress=False, log=quiet)
    assert (first["documents"], first["duplicates"]) == (2, 1), first
    (dup,) = [d for d in rows(idx, "documents") if len(d["source_uris"]) == 2]
    assert dup["key"] == "dup/a.txt"

    rep.unlink()
    second = run_index(test_config, str(src), str(idx), progress=False, log=quiet)
    assert second["balanced"] and second["removed"] == 1, second
    docs = {d["key"]: d for d in rows(idx, "documents")}
    assert sorted(docs) == ["c.txt", "dup/b.txt"], sorted(docs)
    assert [u.rsplit("/src/", 1)[-1] for u in docs["dup/b.txt"]["source_uris"]] == ["dup/b.txt"]
    assert "rye flour" in texts_by_key(idx)["dup/b.txt"]
    sources = {r["key"]: r for r in rows(idx, "sources")}
    assert sources["dup/a.txt"]["status"] == "tombstoned" and sources["dup/b.txt"]["status"] == "live"

    # the same state indexed from scratch gives the same rows
    scratch = run_index(test_config, str(src), str(tmp_path / "scratch"), progress=False, log=quiet)
    assert scratch["documents"] == 2
    for name in ("chunks", "documents"):
        assert rows(idx, name, drop=("indexed_at", "mtime")) == \
            rows(tmp_path / "scratch", name, drop=("indexed_at", "mtime")), name
