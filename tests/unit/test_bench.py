"""bench/ helpers: the generated-corpus fallback and the results writer; the layout of bench/ (what
the make targets run) and bench/studies/. No timings asserted."""
import ast
import importlib
import json
import os
import re

import pytest

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


def test_ocr_bench_corpus_is_ten_percent_scans_with_text_twins(tmp_path):
    """Section 5's corpus: every 10th document an image-only PDF, the rest txt/md/html/text PDF;
    each scan keeps its text-PDF twin (same lines) for the baselines. No OCR is run here."""

    from bench.ocr_bench import make_corpus, twin_corpus
    from transforms.ingest.parse.ocr import OcrSettings
    from transforms.ingest.parse.pdf import parse_pdf_with_errors
    from transforms.records import RawObject

    c = make_corpus(generated_dataset(20).docs, 3, str(tmp_path / "c"))
    names = sorted(os.listdir(c["folder"]))
    assert len(names) == 20 and len(c["scans"]) == 2
    assert {n.rsplit(".", 1)[1] for n in names} == {"pdf", "txt", "md", "html"}
    off = OcrSettings(mode="off")
    for s in c["scans"]:
        assert len(s["lines"]) == 4  # title + 3 lines
        docs, _ = parse_pdf_with_errors(RawObject.from_bytes("file:///t.pdf", "t.pdf", s["text_pdf"]), ocr=off)
        assert docs[0].text.split() == " ".join(s["lines"]).split()
        with pytest.raises(Exception, match="no text extracted"):  # the scan has no text layer
            parse_pdf_with_errors(RawObject.from_bytes("file:///s.pdf", "s.pdf", s["scan"]), ocr=off)
    twin = twin_corpus(c, str(tmp_path / "twin"))
    assert sorted(os.listdir(twin)) == names
    assert all(open(os.path.join(twin, os.path.basename(s["path"])), "rb").read() == s["text_pdf"]
               for s in c["scans"])


# --- layout: bench/ holds what the make targets run, bench/studies/ the tuning studies ---------

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _bench_modules(folder: str) -> list[str]:
    pkg = folder.replace("/", ".")
    return sorted(f"{pkg}.{f[:-3]}" for f in os.listdir(os.path.join(ROOT, folder))
                  if f.endswith(".py") and f != "__init__.py")


@pytest.mark.parametrize("module", _bench_modules("bench") + _bench_modules("bench/studies"))
def test_every_bench_module_imports(module):
    importlib.import_module(module)


def test_bench_holds_only_what_the_make_targets_run():
    """Every module in bench/ is a make target's entry point or imported (also as a child
    process, `python -m bench.job`) by one; tuning studies belong in bench/studies/."""
    makefile = open(os.path.join(ROOT, "Makefile"), encoding="utf-8").read()
    todo = set(re.findall(r"python -m (bench\.\w+)", makefile))
    seen = set()
    while todo:
        mod = todo.pop()
        seen.add(mod)
        if not os.path.exists(os.path.join(ROOT, *mod.split(".")) + ".py"):  # a package (bench.studies)
            continue
        src = open(os.path.join(ROOT, *mod.split(".")) + ".py", encoding="utf-8").read()
        found = {n.module for n in ast.walk(ast.parse(src)) if isinstance(n, ast.ImportFrom) and n.module}
        found |= set(re.findall(r"(?:-m\W+|from )(bench\.\w+)", src))  # child processes, code in strings
        todo |= {m for m in found if m.startswith("bench.") and m.count(".") == 1} - seen
    assert set(_bench_modules("bench")) <= seen, set(_bench_modules("bench")) - seen


def test_every_study_is_described_in_its_readme():
    readme = open(os.path.join(ROOT, "bench", "studies", "README.md"), encoding="utf-8").read()
    for mod in _bench_modules("bench/studies"):
        assert f"`{mod.rsplit('.', 1)[1]}.py`" in readme, mod
