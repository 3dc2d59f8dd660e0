"""bench/ helpers: the generated-corpus fallback and the results writer. No timings asserted."""
import json

from bench.data import generated_dataset, load_dataset, write_corpus, write_questions
from bench.table import Figure, Report


def test_generated_corpus_is_deterministic_real_text():
    a, b = generated_dataset(24), generated_dataset(24)
    assert a.docs == b.docs and a.questions == b.questions
    assert len(a.docs) == 24 and len({d["_id"] for d in a.docs}) == 24
    assert all(len(d["text"].split()) >= 30 and d["title"] for d in a.docs)
    assert a.questions and all(q["question"].endswith("?") for q in a.questions)


def test_missing_data_dir_falls_back_to_generated(tmp_path):
    d = load_dataset(tmp_path / "nowhere", generated_docs=8)
    assert d.name == "generated" and len(d.docs) == 8


def test_take_cycles_with_distinct_ids(tmp_path):
    d = generated_dataset(5)
    docs = d.take(12)
    assert len(docs) == 12 and len({x["_id"] for x in docs}) == 12
    folder = write_corpus(docs, tmp_path / "c")
    lines = (tmp_path / "c" / "corpus.jsonl").read_text().splitlines()
    assert [json.loads(x)["_id"] for x in lines] == [x["_id"] for x in docs] and folder
    qf = write_questions(d.questions, tmp_path / "q.jsonl")
    assert all(set(json.loads(x)) == {"id", "question"} for x in open(qf))


def test_report_writes_json_and_markdown(tmp_path):
    r = Report(echo=lambda *_: None)
    r.add(Figure("S", "rate", 50.0, "q/s", 100.0, "plain loop"))
    r.add(Figure("S", "alone", 3.0, "MB"))
    jp, mp = r.write(str(tmp_path), {"headline": "test run"})
    data = json.load(open(jp))
    assert data["meta"]["headline"] == "test run"
    assert [f["ratio"] for f in data["figures"]] == [0.5, None]
    md = open(mp).read()
    assert "| rate | 50.0 q/s | 100 q/s | 0.50× | plain loop |" in md
    assert "| alone | 3.00 MB |  | – |  |" in md
