"""Who sees what: config `acl:` prefix rules, question `acl` and `filters` (JSONL and CSV)
through the answer job."""
import csv
import json

import pytest

from transforms.records import record_id_of

from pipelines.answer import run_answer
from transforms.index import publish
from transforms.index.shards import read_table
from transforms.ingest.embed import model_spec_from_config
from transforms.query.engine import QAEngine
from transforms.query.records import Question

FILES = ["man/man3/fnmatch.3", "nodejs/api/punycode.md", "records/faq.jsonl"]
MAN_Q = "Which C function matches a filename against a wildcard pattern?"
ERR_Q = "What does error ERR_CONN_4042 mean?"


def quiet(*_):
    pass


@pytest.fixture(scope="module")
def acl_index(test_config, tmp_path_factory):
    """FILES indexed with two prefix rules: man/ -> devs, man/man3/ -> c-devs (both apply)."""
    from configs.schema import AclRule
    from pipelines.index import run_index
    from tests.conftest import copy_corpus

    cfg = test_config.model_copy(update={"acl": [AclRule(prefix="man/", groups=["devs"]),
                                                 AclRule(prefix="man/man3/", groups=["c-devs"])]})
    src = copy_corpus(tmp_path_factory.mktemp("acl-src"), FILES)
    index_dir = tmp_path_factory.mktemp("acl-index")
    build_cfg = cfg
    summary = run_index(build_cfg, str(src), str(index_dir), progress=False, log=quiet)
    assert summary["balanced"]
    chunks = {r["chunk_id"]: r for r in read_table(publish.resolve_index(str(index_dir)), "chunks").to_pylist()}
    for r in chunks.values():
        r["meta"] = json.loads(r["metadata"])
    return cfg, index_dir, chunks


def test_acl_prefix_rules_give_files_their_groups(acl_index):
    _, _, chunks = acl_index
    by_key = {}
    for r in chunks.values():
        by_key.setdefault(r["meta"]["key"], set()).add(tuple(r["acl"] or []))
    assert by_key["man/man3/fnmatch.3"] == {("devs", "c-devs")}  # every matching rule, in order
    assert by_key["nodejs/api/punycode.md"] == {()}  # no rule: public
    # JSONL records keep their own acl; the others under records/ stay public
    faq = {record_id_of(r["doc_id"]): tuple(r["acl"] or []) for r in chunks.values()
           if r["meta"]["key"] == "records/faq.jsonl"}
    assert faq["faq-007"] == ("staff",) and faq["faq-001"] == ()


def _engine(cfg, index_dir, **retrieve):
    if retrieve:
        cfg = cfg.model_copy(update={"retrieve": cfg.retrieve.model_copy(update=retrieve)})
    return QAEngine(publish.resolve_index(str(index_dir)), cfg, model_spec_from_config(cfg))


def test_a_question_sees_prefix_acl_files_only_with_their_group(acl_index):
    cfg, index_dir, chunks = acl_index
    engine = _engine(cfg, index_dir)
    try:
        recs = engine.answer_batch([Question("none", MAN_Q), Question("other", MAN_Q, acl=["staff"]),
                                    Question("devs", MAN_Q, acl=["devs"]),
                                    Question("c-devs", MAN_Q, acl=["contractors", "c-devs"])], top_k=30)
        recs = [r.to_row() for r in recs]
    finally:
        engine.close()
    keys = {r["id"]: [chunks[x["chunk_id"]]["meta"]["key"] for x in r["retrieved"]] for r in recs}
    for qid in ("none", "other"):
        assert keys[qid] and "man/man3/fnmatch.3" not in keys[qid], qid
    for qid in ("devs", "c-devs"):
        assert keys[qid][0] == "man/man3/fnmatch.3", (qid, keys[qid][:3])
    devs = [r for r in recs if r["id"] == "devs"][0]
    assert devs["status"] == "answered" and \
        any(chunks[c["chunk_id"]]["meta"]["key"] == "man/man3/fnmatch.3" for c in devs["citations"])


# --- question acl and filters through the answer job, JSONL and CSV --------------------------

QUESTIONS = [  # id, question, acl, filters
    ("pub", MAN_Q, None, None),
    ("dev", MAN_Q, ["devs"], None),
    ("compliance", ERR_Q, None, {"product": "compliance"}),
    ("staff-ops", "Who is called for severity-1 incidents?", ["staff", "devs"], {"product": "operations"}),
    ("man-only", ERR_Q, ["devs"], {"format": "man"}),
]


def _visible(chunk, acl, filters):
    if chunk["acl"] and not set(chunk["acl"]) & set(acl or []):
        return False
    return all(chunk["meta"].get(k) == v for k, v in (filters or {}).items())


def _check_answers(recs, chunks):
    by_id = {r["id"]: r for r in recs}
    assert sorted(by_id) == sorted(q[0] for q in QUESTIONS)
    for qid, _, acl, filters in QUESTIONS:
        r = by_id[qid]
        assert r["status"] != "error", r
        assert r["retrieved"], qid
        for x in r["retrieved"] + r["citations"]:
            assert _visible(chunks[x["chunk_id"]], acl, filters), (qid, chunks[x["chunk_id"]]["meta"])
    keys = lambda qid: [x["source"].rsplit("/corpus/", 1)[-1] for x in by_id[qid]["retrieved"]]  # noqa: E731
    assert not any(k.endswith("fnmatch.3") for k in keys("pub"))
    assert keys("dev")[0].endswith("man/man3/fnmatch.3")
    # the filter keeps out the document that answers the question
    assert "faq-001" not in {record_id_of(x["doc_id"]) for x in by_id["compliance"]["retrieved"]}
    assert {record_id_of(x["doc_id"]) for x in by_id["staff-ops"]["retrieved"]} == {"faq-008"}  # staff + operations
    assert all(k.endswith("fnmatch.3") for k in keys("man-only"))


def test_question_acl_and_filters_through_the_answer_job_jsonl_and_csv(acl_index, tmp_path):
    cfg, index_dir, chunks = acl_index
    jsonl = tmp_path / "q.jsonl"
    with open(jsonl, "w") as f:
        for qid, q, acl, filters in QUESTIONS:
            rec = {"id": qid, "question": q}
            rec.update({"acl": acl} if acl else {})
            rec.update({"filters": filters} if filters else {})
            f.write(json.dumps(rec) + "\n")
    qcsv = tmp_path / "q.csv"
    with open(qcsv, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["id", "question", "acl", "filters"])
        for qid, q, acl, filters in QUESTIONS:  # CSV: groups joined by ';', filters as JSON
            w.writerow([qid, q, ";".join(acl or []), json.dumps(filters) if filters else ""])

    outs = {}
    for name, qfile in (("jsonl", jsonl), ("csv", qcsv)):
        out = tmp_path / f"answers-{name}.jsonl"
        s = run_answer(cfg, str(index_dir), str(qfile), str(out), progress=False, log=quiet)
        assert s["errors"] == 0 and s["questions_written"] == len(QUESTIONS)
        outs[name] = [json.loads(line) for line in out.read_text().splitlines()]
        _check_answers(outs[name], chunks)
    strip = lambda recs: sorted((r["id"], r["answer"], json.dumps(r["retrieved"])) for r in recs)  # noqa: E731
    assert strip(outs["csv"]) == strip(outs["jsonl"])  # the same questions, whatever the file format


def test_row_masks_follow_access_groups_and_json_metadata_in_chunk_id_order():
    """build_filter_mask, as a segment asks it: rows (chunk_id, acl, metadata), one bool a row
    in chunk_id order; empty acl = public; metadata compared as JSON values (3 != "3")."""
    import numpy as np
    import pyarrow as pa
    from transforms.query.retrieve import build_filter_mask

    n = 30
    order = np.random.default_rng(0).permutation(n).tolist()  # rows out of order: the mask must not care
    rows = pa.table({"chunk_id": [f"c{i:05d}" for i in order],
                     "acl": [["staff"] if i == 11 else [] for i in order],
                     "metadata": [json.dumps({"product": "alpha" if i % 2 else "beta", "tier": i % 3})
                                  for i in order]})
    public = build_filter_mask(rows, None)
    assert not public[11] and public.sum() == n - 1
    assert build_filter_mask(rows, ["eng", "staff"]).all()
    m = build_filter_mask(rows, ["staff"], {"product": "alpha", "tier": 1})
    assert (m == np.array([(i % 2 == 1) and (i % 3 == 1) for i in range(n)])).all()
    assert not build_filter_mask(rows, ["staff"], {"tier": "1"}).any()  # JSON types matter
    assert not build_filter_mask(rows, ["staff"], {"missing": "x"}).any()
