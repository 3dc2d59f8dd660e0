"""bench/check.py (`make bench-check`): the committed results hold every expected figure, a results
value moved past its tolerance or a missing figure fails with one line each, and bench/results stays
a folder of summaries. Results are perturbed in temporary copies only."""
import glob
import json
import os
import re
import shutil

import pytest
import yaml

from bench import check
from bench.jsonfile import dumps

ROOT = check.ROOT
EXPECTED = check.expected_files()


@pytest.fixture
def results_copy(tmp_path):
    shutil.copytree(os.path.join(ROOT, "bench", "results"), tmp_path / "bench" / "results")
    return tmp_path


def _edit_json(root, rel, change):
    path = root / rel
    data = json.loads(path.read_text())
    change(data)
    path.write_text(dumps(data))


def _bench_figure(data, name):
    return next(f for f in data["figures"] if f["figure"] == name)


def test_every_expected_figure_holds_on_the_committed_results():
    assert EXPECTED, "no bench/expected/*.yaml"
    problems = [line for f in EXPECTED for line in check.check_file(f)]
    assert not problems, "\n".join(problems)
    assert check.main([]) == 0


@pytest.mark.parametrize("path", EXPECTED, ids=os.path.basename)
def test_expected_files_are_well_formed(path):
    spec = yaml.safe_load(open(path, encoding="utf-8"))
    names = [f["name"] for f in spec["figures"]]
    assert len(names) == len(set(names)), "duplicate figure names"
    for fig in spec["figures"]:
        assert ("at" in fig) != ("match" in fig), fig["name"]
        assert fig.get("command", spec.get("command")) and fig.get("results", spec.get("results")), fig["name"]
        tol = fig["tolerance"]
        assert isinstance(tol, (int, float)) or re.fullmatch(r"\d+(\.\d+)?%", str(tol)), fig["name"]
        assert fig.get("page") is None or os.path.exists(os.path.join(ROOT, fig["page"])), fig["name"]
        command = fig.get("command", spec.get("command"))
        for mod in re.findall(r"python -m ((?:bench|configs|pipelines)[\w.]*)", command):
            assert os.path.exists(os.path.join(ROOT, *mod.split(".")) + ".py"), (fig["name"], mod)


def test_a_value_past_its_tolerance_fails_with_one_line_per_figure(results_copy):
    def slow_pipeline(data):  # 0.78x -> 0.30x: past its 30%
        _bench_figure(data, "chunks embedded/s, index pipeline (1488 chunks)")["ratio"] = 0.30
        _bench_figure(data, "index job peak RSS, 16× (960 docs, 1422 chunks)")["value"] = 1500.0
    _edit_json(results_copy, "bench/results/bench.json", slow_pipeline)
    eval_md = results_copy / "bench" / "results" / "eval.md"
    eval_md.write_text(eval_md.read_text().replace("| squad (500) | 0.869 | bm25 | 0.857 |",
                                                   "| squad (500) | 0.869 | bm25 | 0.850 |"))
    problems = [line for f in EXPECTED for line in check.check_file(f, results_root=str(results_copy))]
    assert len(problems) == 3, problems
    assert any("index pipeline chunks/s" in p and "0.3 in bench/results/bench.json" in p for p in problems)
    assert any("index job peak RSS 16x" in p for p in problems)
    assert any("squad (500): bm25 nDCG@10" in p and "expected 0.857 ± 0.002" in p for p in problems)


def test_a_value_within_its_tolerance_passes(results_copy):
    _edit_json(results_copy, "bench/results/bench.json", lambda d: _bench_figure(
        d, "chunks embedded/s, index pipeline (1488 chunks)").update(ratio=0.70))  # 0.78x, 30% either way
    _edit_json(results_copy, "bench/results/answer_model.json",
               lambda d: d["eval"]["squad"].update(gold_phrase=d["eval"]["squad"]["gold_phrase"] + 0.0015))  # ± 0.002
    assert not [line for f in EXPECTED for line in check.check_file(f, results_root=str(results_copy))]


def test_a_missing_figure_or_results_file_fails(results_copy):
    _edit_json(results_copy, "bench/results/bench.json", lambda d: d["figures"].remove(
        _bench_figure(d, "run_index wall")))
    os.remove(results_copy / "bench" / "results" / "nightly.json")
    problems = [line for f in EXPECTED for line in check.check_file(f, results_root=str(results_copy))]
    assert [p for p in problems if "run_index wall" in p and "missing" in p]
    nightly = [p for p in problems if p.startswith("bench/expected/nightly.yaml")]
    assert nightly and all("bench/results/nightly.json does not exist" in p for p in nightly)
    assert len(problems) == 1 + len(nightly)


def test_a_figure_no_longer_shown_on_its_page_fails(tmp_path):
    spec = {"command": "python -m bench.run", "results": "bench/results/bench.json", "figures": [
        {"name": "pipeline ratio", "at": "figures[figure=chunks embedded/s, index pipeline (1488 chunks)].ratio",
         "value": 0.78, "tolerance": "30%", "page": "docs/benchmarks.md", "text": "| 0.99× |"}]}
    path = tmp_path / "one.yaml"
    path.write_text(yaml.safe_dump(spec))
    problems = check.check_file(str(path))
    assert len(problems) == 1 and problems[0].endswith(": pipeline ratio: docs/benchmarks.md no longer shows '| 0.99× |'")
    assert check.main([str(path)]) == 1


def test_paths_ratios_and_markdown_tables():
    rows = check.load_results(os.path.join(ROOT, "bench", "results", "eval.md"))
    assert check.walk(rows, '[dataset (queries)=squad (500)&stage=dense]."nDCG@10"') == "0.790"  # blank cells: the row above's
    data = {"a": [{"k": 1, "v": {"x.y": 2.0}}, {"k": 2, "v": {"x.y": 4.0}}], "b": 8}
    assert check.walk(data, 'a[k=2].v."x.y"') == 4.0 and check.walk(data, "a[0].k") == 1
    with pytest.raises(check.Missing):
        check.walk(data, "a[k=3]")
    assert check.within(0.5, 0.78, "40%") and not check.within(0.4, 0.78, "40%")
    assert check.within(0.859, 0.860, 0.002) and not check.within(0.857, 0.860, 0.002)


def test_make_bench_ends_with_the_check_of_what_it_wrote(results_copy, capsys):
    from bench.run import _check
    assert _check(os.path.join(ROOT, "bench", "results", "bench.json")) == 0
    assert check.check_results(os.path.join(ROOT, "bench", "results", "quick", "bench.json")) == []  # none expected
    assert "0 problems" in capsys.readouterr().out


def test_results_json_round_trips_one_row_a_line():
    data = {"meta": {"a": 1, "nested": {"deep": [1, 2, {"x": None}]}}, "rows": [{"k": i, "s": "é"} for i in range(8)]}
    text = dumps(data)
    assert json.loads(text) == data
    rows = [f'  {{"k": {i}, "s": "é"}}' + ("," if i < 7 else "") for i in range(8)]
    assert text.splitlines() == ['{', ' "meta": {"a": 1, "nested": {"deep": [1, 2, {"x": null}]}},', ' "rows": [',
                                 *rows, ' ]', '}']


def test_bench_results_hold_summaries_only():
    """Under 1,500 lines in all: raw rows, grids and per-question files go to out/bench/."""
    files = [p for p in glob.glob(os.path.join(ROOT, "bench", "results", "**", "*"), recursive=True)
             if os.path.isfile(p) and os.sep + "quick" + os.sep not in p]
    assert sum(len(open(p, encoding="utf-8").read().splitlines()) for p in files) < 1500
