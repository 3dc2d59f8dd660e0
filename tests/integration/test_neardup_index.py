"""Near-duplicate detection inside the index job: real pipelines over real files."""
from __future__ import annotations

import random


from pipelines.index import run_index
from tests.planted_corpus import _Gen
from transforms.index import publish
from transforms.index.shards import read_table


def quiet(*_):
    pass


def _texts():
    gen = _Gen(7)
    a, c, d = (gen.body(220, 260) for _ in range(3))

    def edit(text, seed, word):
        words = text.split(" ")
        i = random.Random(seed).randrange(10, len(words) - 10)
        words[i] = word
        return " ".join(words)
    return {"a": a, "b": edit(a, 1, "zebrafinch"), "r": edit(a, 2, "quokkamarsh"), "c": c, "d": d}


T = _texts()
FILES = {"docs/alpha.txt": T["a"], "docs/beta.txt": T["b"], "docs/other.txt": T["c"],
         "restricted/alpha-copy.txt": T["r"], "docs/third.txt": T["d"]}


def write(root, files):
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text + "\n")


def config(test_config):
    from configs.schema import AclRule
    return test_config.model_copy(update={"acl": [AclRule(prefix="restricted/", groups=["staff"])],
                                          "artifacts": test_config.artifacts.model_copy(update={"build": False})})


def tables(index_dir):
    v = publish.resolve_index(str(index_dir))
    docs = read_table(v, "documents").to_pylist()
    near = read_table(v, "near_duplicates").to_pylist()
    sigs = read_table(v, "signatures").to_pylist()
    chunks = read_table(v, "chunks", ["doc_id", "text", "source_uris"]).to_pylist()
    return docs, near, sigs, chunks


def by_key(docs):
    return {d["key"]: d for d in docs}


def test_near_copies_are_merged_per_acl_and_reruns_agree(test_config, tmp_path):
    cfg = config(test_config)
    corpus = tmp_path / "corpus"
    write(corpus, FILES)
    s1 = run_index(cfg, str(corpus), str(tmp_path / "i1"), progress=False, log=quiet)
    assert s1["balanced"], s1
    assert s1["near_duplicates"] == 1 and s1["documents"] == 4 and s1["parsed_documents"] == 5
    docs, near, sigs, chunks = tables(tmp_path / "i1")
    keys = by_key(docs)
    # alpha and beta: one document (the restricted near-copy is not merged: other ACL)
    assert set(keys) == {"docs/other.txt", "docs/third.txt", "restricted/alpha-copy.txt"} | (
        {"docs/alpha.txt"} if "docs/alpha.txt" in keys else {"docs/beta.txt"})
    [row] = near
    rep = next(d for d in docs if d["doc_id"] == row["representative"])
    member_path = row["member_source_uris"][0]
    assert {p.rsplit("/", 1)[-1] for p in row["member_source_uris"]} <= {"alpha.txt", "beta.txt"}
    assert member_path in rep["source_uris"] and len(rep["source_uris"]) == 2
    assert 0.9 <= row["similarity"] < 1.0
    assert keys["restricted/alpha-copy.txt"]["acl"] == ["staff"]
    assert {c["doc_id"] for c in chunks} == {d["doc_id"] for d in docs}  # the member is not chunked
    assert all(member_path in c["source_uris"] for c in chunks if c["doc_id"] == rep["doc_id"])
    assert len(sigs) == 5 and sum(1 for s in sigs if s["representative"]) == 1
    # a rerun into a new index, files listed in another order: the same ids
    corpus2 = tmp_path / "corpus2"
    write(corpus2, dict(reversed(list(FILES.items()))))
    s2 = run_index(cfg, str(corpus2), str(tmp_path / "i2"), progress=False, log=quiet)
    docs2, near2, _, _ = tables(tmp_path / "i2")
    assert sorted(d["doc_id"] for d in docs2) == sorted(d["doc_id"] for d in docs)
    assert [(r["member"], r["representative"], r["similarity"]) for r in near2] == \
        [(r["member"], r["representative"], r["similarity"]) for r in near]
    assert s2["near_duplicates"] == 1


def test_nightly_near_copy_joins_and_deleted_representative_hands_over(test_config, tmp_path):
    cfg = config(test_config)
    corpus, index = tmp_path / "corpus", tmp_path / "index"
    write(corpus, {"docs/alpha.txt": T["a"], "docs/other.txt": T["c"]})
    first = run_index(cfg, str(corpus), str(index), progress=False, log=quiet)
    assert first["balanced"] and first["near_duplicates"] == 0
    alpha = by_key(tables(index)[0])["docs/alpha.txt"]["doc_id"]

    # night 1: a near-copy appears; it joins alpha's cluster without being chunked or embedded
    write(corpus, {"docs/zeta.txt": T["b"]})
    second = run_index(cfg, str(corpus), str(index), progress=False, log=quiet)
    assert second["balanced"], second
    assert (second["read"], second["near_duplicates"], second["chunks"], second["documents"]) == (1, 1, 0, 0)
    docs, near, sigs, chunks = tables(index)
    [row] = near
    assert row["representative"] == alpha and row["member_source_uris"] == [str(corpus / "docs/zeta.txt")]
    assert str(corpus / "docs/zeta.txt") in by_key(docs)["docs/alpha.txt"]["source_uris"]
    assert len(sigs) == 3 and len(docs) == 2
    assert not any("zebrafinch" in c["text"] for c in chunks)

    # night 2: nothing changed; the cluster is carried over as it is
    third = run_index(cfg, str(corpus), str(index), progress=False, log=quiet)
    assert third["balanced"] and third["read"] == 0 and third["carried_near_duplicates"] == 1
    assert tables(index)[1] == near

    # night 3: the representative is deleted; the member takes over and is indexed
    (corpus / "docs/alpha.txt").unlink()
    built = cfg.model_copy(update={"artifacts": test_config.artifacts})
    fourth = run_index(built, str(corpus), str(index), progress=False, log=quiet)
    assert fourth["balanced"], fourth
    docs, near, sigs, chunks = tables(index)
    assert near == [] and set(by_key(docs)) == {"docs/other.txt", "docs/zeta.txt"}
    zeta = by_key(docs)["docs/zeta.txt"]
    assert zeta["source_uris"] == [str(corpus / "docs/zeta.txt")] and zeta["chunk_count"] > 0
    assert any("zebrafinch" in c["text"] for c in chunks if c["doc_id"] == zeta["doc_id"])
    assert len(sigs) == 2 and not any(s["representative"] for s in sigs)
    # and its text is searchable
    from transforms.ingest.embed import model_spec_from_config
    from transforms.query.engine import QAEngine
    from transforms.query.records import Question
    engine = QAEngine(publish.resolve_index(str(index)), built, model_spec_from_config(built))
    try:
        [rec] = engine.answer_batch([Question("q", "zebrafinch")], top_k=3)
    finally:
        engine.close()
    assert rec.to_row()["retrieved"][0]["doc_id"] == zeta["doc_id"]
