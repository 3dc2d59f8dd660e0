"""Answer-level evaluation (issue 34): the reliability table, ECE and AUC checked by hand on small
inputs, code-form gold phrases, the report's answer figures and calibration section, and the answer
job's count of answers per confidence band."""
from __future__ import annotations

import html.parser
import json
import math
from fractions import Fraction

import pytest

from transforms.evaluation import metrics as M
from transforms.evaluation import report as R

# --- bands ------------------------------------------------------------------------------


@pytest.mark.parametrize("c,band", [(0.0, 0), (0.05, 0), (0.0999, 0), (0.1, 1), (0.2, 2), (0.3, 3), (0.6, 6),
                                    (0.7, 7), (0.8999, 8), (0.9, 9), (0.95, 9), (1.0, 9),
                                    (0.1 + 0.2, 3),  # 0.30000000000000004
                                    (0.7 - 1e-12, 6), (0.3 - 1e-16, 2),  # below an edge, however little
                                    (-0.1, 0), (1.5, 9)])
def test_a_confidence_lands_in_the_band_that_holds_it(c, band):
    assert M.band_of(c) == band


def test_band_counts_match_exact_interval_arithmetic():
    """Every hundredth from 0 to 1: band i holds exactly the values in [i/10, (i+1)/10) (1.0 in the
    last); an off-by-one or float-truncation in the banding moves values and fails here."""
    values = [k / 100 for k in range(101)]
    rows = M.reliability_table(values, [False] * len(values))
    expected = [sum(Fraction(i, 10) <= Fraction(k, 100) < Fraction(i + 1, 10) for k in range(101)) for i in range(10)]
    expected[9] += 1  # 1.0
    assert [r["count"] for r in rows] == expected == [10] * 9 + [11]
    for i, r in enumerate(rows):
        members = [k / 100 for k in range(101) if min(int(Fraction(k, 100) * 10), 9) == i]
        assert r["mean_confidence"] == pytest.approx(sum(members) / len(members))
        assert r["band"] == f"{i / 10:.1f}-{(i + 1) / 10:.1f}" and r["lo"] == pytest.approx(i / 10)


def test_reliability_table_and_ece_by_hand():
    conf = [0.05, 0.15, 0.18, 0.95, 1.0]
    right = [False, True, False, True, True]
    rows = M.reliability_table(conf, right)
    assert len(rows) == 10
    assert [r["count"] for r in rows] == [1, 2, 0, 0, 0, 0, 0, 0, 0, 2]
    assert rows[0]["mean_confidence"] == pytest.approx(0.05) and rows[0]["share_right"] == 0.0
    assert rows[1]["mean_confidence"] == pytest.approx(0.165) and rows[1]["share_right"] == 0.5
    assert rows[9]["mean_confidence"] == pytest.approx(0.975) and rows[9]["share_right"] == 1.0
    assert math.isnan(rows[4]["mean_confidence"]) and math.isnan(rows[4]["share_right"])
    # 1/5 * |0.05 - 0| + 2/5 * |0.165 - 0.5| + 2/5 * |0.975 - 1| = 0.01 + 0.134 + 0.01
    assert M.expected_calibration_error(conf, right) == pytest.approx(0.154)


def test_ece_is_zero_when_calibrated_and_weighted_by_band_count():
    # 4 answers at 0.25 (1 right) and 4 at 0.75 (3 right): each band's share equals its confidence
    conf = [0.25] * 4 + [0.75] * 4
    right = [True, False, False, False, True, True, True, False]
    assert M.expected_calibration_error(conf, right) == pytest.approx(0.0)
    # weighted by band count: 1 answer at 0.95 and 9 at 0.05, none right
    conf, right = [0.95] + [0.05] * 9, [False] * 10
    assert M.expected_calibration_error(conf, right) == pytest.approx(0.1 * 0.95 + 0.9 * 0.05)
    assert math.isnan(M.expected_calibration_error([], []))
    with pytest.raises(ValueError):
        M.reliability_table([0.5], [True, False])


def test_ece_changes_when_one_answer_moves_across_a_band_edge():
    """0.3 is band 3's: with it there, band 2 (0.25, wrong) and band 3 (0.3, 0.35, right) are each
    far from their confidence; put in band 2 the figure would differ."""
    conf, right = [0.25, 0.3, 0.35], [False, True, True]
    rows = M.reliability_table(conf, right)
    assert rows[2]["count"] == 1 and rows[3]["count"] == 2
    expected = 1 / 3 * 0.25 + 2 / 3 * (1 - 0.325)
    assert M.expected_calibration_error(conf, right) == pytest.approx(expected)


def test_auc_of_confidence_vs_right_by_hand():
    # right {0.9, 0.3} vs not right {0.8, 0.2}: 0.9 > both, 0.3 > 0.2 only -> 3 of 4 pairs
    assert M.auc_of([0.9, 0.8, 0.3, 0.2], [True, False, True, False]) == pytest.approx(0.75)
    assert M.auc_of([0.5, 0.5], [True, False]) == pytest.approx(0.5)  # a tie counts half
    assert math.isnan(M.auc_of([0.4, 0.6], [True, True]))


# --- code-form gold phrases --------------------------------------------------------------

@pytest.mark.parametrize("phrase,code", [
    ("sprintf", True), ("File::Copy", True), ("os.path.join", True), ("copy.deepcopy()", True), ("$_", True),
    ("user.name", True), ("sqlite3_open", True), ("tr", True), ("git config", False), ("git-config", False),
    ("the answer", False), ("", False), ("  ", False), ("1984", False)])
def test_which_gold_phrases_look_like_code(phrase, code):
    assert M.looks_like_code(phrase) is code


def test_a_code_name_counts_only_as_a_whole_name():
    assert M.contains_code_name("Use open(FH, '<', $path) to read it.", ["open"])
    assert not M.contains_code_name("Reopen the handle.", ["open"])
    assert not M.contains_code_name("A string of words.", ["tr"])
    assert M.contains_code_name("Call tr/a-z/A-Z/ on it", ["tr"])
    assert M.contains_code_name("See File::Copy for this.", ["file::copy"])  # case aside, as contains_span
    assert M.contains_code_name("print $_ twice", ["$_"])
    assert not M.contains_code_name("print $_x twice", ["$_"])
    assert M.contains_code_name("use copy.deepcopy() here", ["copy.deepcopy()"])
    assert M.contains_code_name("opener open", ["open"])  # a later whole occurrence still counts
    assert not M.contains_code_name("", ["open"]) and not M.contains_code_name("open", [""])


# --- the report's answer figures -----------------------------------------------------------

def q(i, status="answered", page=True, phrase=True, conf=None, evidence=0.5, group=None, code=None):
    """A per-question record as evaluator.question_record writes it (the fields the report reads)."""
    answered = status == "answered"
    right_page = answered and page
    gold = answered and phrase
    return {"id": f"q{i}", "group": group, "status": status, "confidence": conf, "evidence_score": evidence,
            "right_page_cited": right_page, "gold_in_answer": gold, "right": right_page and gold,
            "names_code": code}


def test_answer_figures_and_status_mix_by_hand():
    recs = [q(1, conf=0.9, code=True), q(2, page=False, conf=0.8, code=False), q(3, phrase=False, conf=0.4),
            q(4, status="not_found", conf=0.1, code=False), q(5, status="unsupported", conf=0.2),
            q(6, status="error", conf=None)]
    a = R.answer_figures(recs)
    assert a["questions"] == 6
    assert a["right"] == pytest.approx(1 / 6) and a["right (of answered)"] == pytest.approx(1 / 3)
    assert a["right_page_cited"] == pytest.approx(2 / 6) and a["gold_span_in_answer"] == pytest.approx(2 / 6)
    assert a["names_code_questions"] == 3 and a["names_code"] == pytest.approx(1 / 3)
    assert a["not_found_on_answerable"] == pytest.approx(1 / 6)
    mix = R.status_mix(recs + [dict(q(7), status="weird")])
    assert mix["counts"] == {"answered": 3, "not_found": 1, "unsupported": 1, "error": 2}
    assert mix["shares"]["answered"] == pytest.approx(3 / 7)


def test_calibration_over_answered_questions_by_hand():
    recs = [q(1, conf=0.95), q(2, conf=0.92), q(3, page=False, conf=0.91), q(4, phrase=False, conf=0.15),
            q(5, conf=0.12), q(6, status="not_found", conf=0.05)]
    c = R.calibration(recs)
    assert c["score"] == "confidence" and c["records_without_confidence"] == 0 and "fallback" not in c
    assert c["over"] == "answered questions" and c["questions"] == 5
    rows = c["reliability"]
    assert [r["count"] for r in rows] == [0, 2, 0, 0, 0, 0, 0, 0, 0, 3]
    assert rows[9]["share_right"] == pytest.approx(2 / 3) and rows[9]["mean_confidence"] == pytest.approx(0.9266667)
    assert rows[1]["share_right"] == pytest.approx(0.5) and rows[1]["mean_confidence"] == pytest.approx(0.135)
    assert c["ece"] == pytest.approx(3 / 5 * abs(0.9266667 - 2 / 3) + 2 / 5 * abs(0.135 - 0.5), abs=1e-6)
    # right {0.95, 0.92, 0.12} vs not {0.91, 0.15}: pairs won 2 + 2 + 0 of 6
    assert c["auc_confidence_vs_right"] == pytest.approx(4 / 6)
    # with the not-found question (not right, 0.05) among the negatives: 2+2+1 + ... of 9
    assert c["auc_confidence_vs_right (all questions)"] == pytest.approx(7 / 9)
    assert c["mean_confidence (answered)"] == pytest.approx((0.95 + 0.92 + 0.91 + 0.15 + 0.12) / 5)
    assert c["share_right (answered)"] == pytest.approx(3 / 5)
    assert c["calibration_gap (answered)"] == pytest.approx(0.61 - 0.6)
    assert "cites a gold page" in c["right_definition"] and "gold phrase" in c["right_definition"]


def test_calibration_falls_back_to_evidence_score_and_says_so():
    recs = [q(1, conf=None, evidence=0.85), q(2, page=False, conf=None, evidence=0.35)]
    c = R.calibration(recs)
    assert c["score"] == "evidence_score" and c["records_without_confidence"] == 2
    assert "evidence_score" in c["fallback"] and "2 of 2" in c["fallback"]
    assert [r["count"] for r in c["reliability"]][3] == 1 and c["reliability"][8]["count"] == 1
    mixed = R.calibration([q(1, conf=0.9), q(2, conf=None, evidence=0.2)])
    assert mixed["score"].startswith("confidence, evidence_score") and mixed["records_without_confidence"] == 1


def test_report_sections_json_text_and_html():
    from transforms.evaluation.report import _finite, format_table
    from transforms.evaluation.report_html import answer_calibration_section
    recs = [q(1, conf=0.9, group="tune", code=True), q(2, conf=0.3, group="tune", page=False),
            q(3, conf=0.8, group="eval", code=False), q(4, status="not_found", conf=0.1, group="eval")]
    report = {"dataset": "d", "index_version": "v", "counts": {"queries_evaluated": 4}, "stages": {
        s: {m: 0.5 for m in M.METRICS} for s in M.STAGES}, "bm25_floor_ndcg@10": {}, "triage": {"answered": 0.75},
        "answer_status": R.status_mix(recs), "answers": {**R.answer_figures(recs), "threshold": 0.3},
        "calibration": R.calibration(recs),
        "answers_by_group": {g: R.group_answer_figures([r for r in recs if r["group"] == g]) for g in ("eval", "tune")},
        "timings": {}}
    text = json.dumps(_finite(report), allow_nan=False)  # empty bands are null, not NaN
    assert json.loads(text)["calibration"]["reliability"][5]["mean_confidence"] is None
    table = format_table(report)
    assert "calibration (confidence over 3 answered" in table and "ECE" in table and "group tune" in table
    assert "status: answered 3, not_found 1, unsupported 0, error 0" in table
    page = "".join(answer_calibration_section(report, recs))

    class P(html.parser.HTMLParser):
        tags: list = []

        def handle_starttag(self, tag, attrs):
            self.tags.append(tag)
    p = P()
    p.feed(page)
    assert "Answer-level figures and calibration" in page and "cites a gold page" in page
    assert p.tags.count("svg") == 2 and "0.9-1.0" in page and "per query group" in page
    assert "Note:" not in page
    fallback = dict(report, calibration=R.calibration([q(1, evidence=0.7)]))
    assert "Note:" in "".join(answer_calibration_section(fallback, [q(1, evidence=0.7)]))


# --- the answer job's summary: answers per confidence band ------------------------------------

def _records():
    """Answer rows as AnswerRecord.to_row writes them (built as dicts: the fields counted only)."""
    confs = [0.0, 0.1, 0.2499, 0.25, 0.4, 0.5, 0.74, 0.75, 0.9, 1.0]
    rows = [{"id": f"a{i}", "status": "answered", "invalid_citations": 0, "confidence": c}
            for i, c in enumerate(confs)]
    rows.append({"id": "n", "status": "not_found", "invalid_citations": 0, "confidence": 0.1})  # not an answer
    rows.append({"id": "x", "status": "answered", "invalid_citations": 1, "confidence": None})  # none
    rows.append({"id": "e", "status": "error", "invalid_citations": 0, "confidence": None})
    return rows


BANDS = {"<0.25": 3, "0.25-0.5": 2, "0.5-0.75": 2, ">=0.75": 3, "none": 1}


def test_status_counts_count_answers_per_confidence_band():
    from transforms.query.output_stats import StatusCounts, confidence_band, format_confidence_bands
    assert [confidence_band(c) for c in (0.0, 0.2499, 0.25, 0.4999, 0.5, 0.7499, 0.75, 1.0)] == [
        "<0.25", "<0.25", "0.25-0.5", "0.25-0.5", "0.5-0.75", "0.5-0.75", ">=0.75", ">=0.75"]
    s = StatusCounts()
    n = s.add_jsonl(b"".join(json.dumps(r).encode() + b"\n" for r in _records()))
    assert n == 13
    assert s.counts["answered"] == 11 and s.counts["not_found"] == 1 and s.counts["error"] == 1
    assert s.counts["confidence_bands"] == BANDS
    assert format_confidence_bands(BANDS) == ("answered by confidence: <0.25 3, 0.25-0.5 2, 0.5-0.75 2, "
                                              ">=0.75 3; 1 without one")
    # records without any confidence (an answerer that gives none): no band counts at all
    s = StatusCounts()
    s.add_jsonl(b'{"status": "answered"}\n{"status": "answered", "confidence": null}\n')
    assert "confidence_bands" not in s.counts and s.counts["answered"] == 2
    s = StatusCounts()
    s.add("answered", 0, float("nan"))  # not finite: no confidence
    assert "confidence_bands" not in s.counts


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_the_joined_outputs_summary_counts_carry_the_bands(tmp_path, fmt):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from pipelines.answer import join_parts, part_path
    from transforms.query.output_stats import count_output
    rows = _records()
    parts = tmp_path / f"out.{fmt}.parts"
    parts.mkdir()
    for shard, part in enumerate((rows[:6], rows[6:])):
        path = part_path(str(parts), shard, 2, fmt)
        if fmt == "parquet":
            pq.write_table(pa.Table.from_pylist(part), path)
        else:
            with open(path, "w", encoding="utf-8") as f:
                f.writelines(json.dumps(r) + "\n" for r in part)
    out = tmp_path / f"out.{fmt}"
    n, counts = join_parts(str(parts), str(out), fmt, 2)
    assert n == 13 and counts["confidence_bands"] == BANDS
    assert count_output(str(out), fmt) == counts
