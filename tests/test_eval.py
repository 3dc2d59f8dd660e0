"""Evaluation: metric definitions, `ragbeam eval` end to end, and the index job's eval gate."""
from __future__ import annotations

import html.parser
import json
import math
import os

import pytest

from transforms.evaluation import metrics as M

# --- metrics on hand-made rankings ------------------------------------------------------


def test_ndcg_graded_gains_trec_definition():
    qrels = {"b": 2, "d": 1, "e": 3, "x": 0}
    dcg = 2 / math.log2(3) + 1 / math.log2(5)  # b at rank 2, d at rank 4; gain = grade
    idcg = 3 / math.log2(2) + 2 / math.log2(3) + 1 / math.log2(4)  # e, b, d; x (grade 0) is not relevant
    assert M.ndcg_at_k(["a", "b", "c", "d"], qrels, 10) == pytest.approx(dcg / idcg)
    assert M.ndcg_at_k(["e", "b", "d"], qrels, 10) == pytest.approx(1.0)
    assert M.ndcg_at_k(["a", "c"], qrels, 10) == 0.0
    # the cutoff: only rank 1 counts at k=1
    assert M.ndcg_at_k(["b", "e"], qrels, 1) == pytest.approx(2 / 3)
    assert M.metric_fn("ndcg@10")(["a", "b", "c", "d"], qrels) == pytest.approx(dcg / idcg)


def test_recall_mrr_and_first_rank():
    qrels = {"b": 2, "d": 1, "e": 3, "x": 0}
    ranked = ["a", "b", "x", "d", "f"]
    assert M.recall_at_k(ranked, qrels, 1) == 0.0
    assert M.recall_at_k(ranked, qrels, 2) == pytest.approx(1 / 3)
    assert M.recall_at_k(ranked, qrels, 5) == pytest.approx(2 / 3)
    assert M.mrr_at_k(ranked, qrels, 10) == 0.5
    assert M.mrr_at_k(ranked, qrels, 1) == 0.0
    assert M.first_relevant_rank(ranked, qrels) == 2
    assert M.first_relevant_rank(["x", "a"], qrels) is None
    assert M.metric_fn("recall@5")(ranked, qrels) == pytest.approx(2 / 3)
    with pytest.raises(ValueError):
        M.metric_fn("precision@3")


def test_chunk_to_document_ranking_and_answer_helpers():
    assert M.dedupe_first(["d1", "d1", "d2", "d1", "d3"]) == ["d1", "d2", "d3"]
    assert M.contains_span("It  was the DENVER\nBroncos. [1]", ["Carolina", "Denver Broncos"])
    assert not M.contains_span("the Panthers", ["Denver Broncos"])
    assert M.citation_precision(["d1", "d1", "d2"], {"d1"}) == 0.5
    assert M.citation_precision([], {"d1"}) is None
    assert M.auc([0.9, 0.8], [0.1, 0.8]) == pytest.approx(0.875)
    best = M.best_threshold(M.threshold_sweep([0.7, 0.8, 0.9], [0.2, 0.3, 0.75]))
    assert best["threshold"] == pytest.approx(0.31) and best["balanced_accuracy"] == pytest.approx(5 / 6)


# --- a tiny BEIR dataset ------------------------------------------------------------------

DOCS = {
 "bread_0": ("Sourdough starter", "A sourdough starter is a mixture of flour and water that captures wild yeast and lactic acid bacteria. Bakers feed the starter every day with fresh flour so that it stays active. A lively starter doubles in size within six hours of feeding."),
 "bread_1": ("Kneading dough", "Kneading develops the gluten network that gives bread its chewy structure. Most doughs need about ten minutes of kneading by hand. The windowpane test shows when the gluten is strong enough."),
 "bread_2": ("Baking temperature", "Crusty loaves are usually baked in a very hot oven at around 230 degrees Celsius. Steam in the first minutes keeps the crust soft so the loaf can rise fully. The bread is done when the inside reaches 96 degrees."),
 "bread_3": ("Rye bread", "Rye flour contains little gluten, so rye breads are dense and moist. Traditional rye bread from Germany is often leavened with a sour culture. Caraway seeds are a common flavouring."),
 "bread_4": ("Storing bread", "Bread goes stale because its starch recrystallises, not simply because it dries out. Keeping bread in the refrigerator makes it stale faster. Freezing slices preserves freshness for weeks."),
 "volcano_0": ("Shield volcanoes", "Shield volcanoes are built from fluid basaltic lava that flows long distances. Mauna Loa in Hawaii is the largest shield volcano on Earth. Their eruptions are usually gentle rather than explosive."),
 "volcano_1": ("Stratovolcanoes", "Stratovolcanoes are steep cones made of alternating layers of lava and ash. Their sticky magma traps gas, which leads to violent explosive eruptions. Mount Fuji and Mount St. Helens are famous examples."),
 "volcano_2": ("Pyroclastic flows", "A pyroclastic flow is a fast current of hot gas and volcanic rock that races down the slopes of a volcano. These flows can reach speeds of several hundred kilometres per hour. The eruption of Vesuvius in 79 AD buried Pompeii under such flows."),
 "volcano_3": ("Volcanic ash and climate", "Large eruptions inject sulphur dioxide into the stratosphere, where it forms aerosols that reflect sunlight. The 1991 eruption of Pinatubo cooled the global climate by about half a degree for two years."),
 "volcano_4": ("Magma chambers", "Magma collects in chambers several kilometres below the surface before an eruption. Rising magma causes small earthquakes and makes the ground swell, which scientists measure to forecast eruptions."),
 "honeybee_0": ("The waggle dance", "Honeybee foragers perform a waggle dance to tell their sisters where flowers are. The angle of the dance shows the direction of the food relative to the sun. The length of the waggle run encodes the distance."),
 "honeybee_1": ("The queen bee", "A honeybee colony has a single queen who lays up to two thousand eggs a day. Workers raise a new queen by feeding a young larva royal jelly. The queen mates only once, early in her life."),
 "honeybee_2": ("Making honey", "Bees make honey from flower nectar by adding enzymes and fanning it with their wings to evaporate water. Honey is stored in wax cells and capped when its water content falls below about eighteen percent."),
 "honeybee_3": ("Varroa mites", "The varroa mite is a parasite that feeds on honeybees and spreads viruses through the colony. It is the most serious threat to beekeeping worldwide. Beekeepers treat hives with organic acids to control the mites."),
 "honeybee_4": ("Swarming", "Swarming is how honeybee colonies reproduce. The old queen leaves the hive with about half of the workers, and scout bees search for a new nest site such as a hollow tree."),
 "chess_0": ("Castling", "Castling is the only move in chess in which two pieces move at once: the king moves two squares toward a rook and the rook jumps over it. Castling is not allowed when the king is in check."),
 "chess_1": ("En passant", "En passant is a special pawn capture. When a pawn advances two squares and lands beside an enemy pawn, that enemy pawn may capture it as if it had moved only one square, but only on the very next move."),
 "chess_2": ("The Sicilian Defence", "The Sicilian Defence begins with the moves 1.e4 c5. It is the most popular reply to the king's pawn opening among strong players because it creates an unbalanced position."),
 "chess_3": ("Stalemate", "Stalemate occurs when the player to move has no legal move and is not in check. A stalemate ends the game as a draw, which often saves the weaker side in the endgame."),
 "chess_4": ("World champions", "Wilhelm Steinitz became the first official world chess champion in 1886. Garry Kasparov held the title from 1985 until 2000 and later lost a famous match to the computer Deep Blue."),
 "lighthouse_0": ("The Pharos of Alexandria", "The Pharos of Alexandria was a lighthouse built in the third century BC on the island of Pharos in Egypt. It was one of the Seven Wonders of the Ancient World and stood for more than a thousand years before earthquakes destroyed it."),
 "lighthouse_1": ("Fresnel lenses", "The Fresnel lens, invented by the French physicist Augustin Fresnel in 1822, focuses the light of a lamp into a powerful beam. Its concentric rings of glass made lighthouse lights visible more than twenty miles away."),
 "lighthouse_2": ("Lighthouse keepers", "Lighthouse keepers trimmed the wicks, wound the clockwork that turned the lens and kept logs of the weather. Most lighthouses were automated in the twentieth century, and the last keepers left in the 1990s."),
 "lighthouse_3": ("Light characteristics", "Each lighthouse has its own pattern of flashes, called its characteristic, so that sailors can tell lighthouses apart at night. The pattern is printed on nautical charts."),
 "lighthouse_4": ("Eddystone Lighthouse", "The Eddystone Lighthouse stands on dangerous rocks south of Plymouth in England. John Smeaton's tower of 1759 used interlocking granite blocks and pioneered hydraulic lime that sets under water."),
 "tea_0": ("Green and black tea", "Green tea and black tea come from the same plant, Camellia sinensis. Black tea leaves are oxidised before drying, while green tea leaves are heated quickly to stop oxidation."),
 "tea_1": ("Brewing tea", "Green tea should be brewed with water at about 80 degrees Celsius for two to three minutes. Boiling water makes green tea bitter. Black tea tolerates boiling water and longer steeping."),
 "tea_2": ("Caffeine in tea", "A cup of tea contains roughly half the caffeine of a cup of coffee. Tea also contains the amino acid theanine, which is said to promote calm alertness."),
 "tea_3": ("Matcha", "Matcha is finely ground powder of shade-grown green tea leaves. In the Japanese tea ceremony the powder is whisked with hot water using a bamboo whisk until it foams."),
 "tea_4": ("The tea trade", "Tea reached Europe in the seventeenth century through Dutch traders. In Britain the high tax on tea encouraged widespread smuggling until the tax was cut in 1784."),
}
QUERIES = [
 ("q1", "How do honeybees communicate the location of flowers?", {"honeybee_0": 2, "honeybee_4": 1}, ["waggle dance"]),
 ("q2", "What temperature should water be for brewing green tea?", {"tea_1": 2}, ["80 degrees Celsius", "about 80 degrees"]),
 ("q3", "Which lighthouse was one of the Seven Wonders of the Ancient World?", {"lighthouse_0": 2}, ["Pharos of Alexandria"]),
 ("q4", "When is castling not allowed in chess?", {"chess_0": 2}, ["when the king is in check"]),
 ("q5", "How did the eruption of Pinatubo affect the global climate?", {"volcano_3": 2, "volcano_2": 0}, ["half a degree"]),
 ("q6", "Why does bread go stale?", {"bread_4": 2}, ["starch recrystallises"]),
]

FILLER = ["The committee will review the quarterly budget at its next meeting.",
          "Please remember to submit your travel receipts before the end of the month.",
          "The parking garage on the east side will be closed for resurfacing.",
          "Our new office furniture is expected to arrive sometime next week.",
          "The printer on the third floor has been replaced with a newer model."]


def write_corpus(path, broken=False):
    with open(path, "w", encoding="utf-8") as f:
        for n, (doc_id, (title, text)) in enumerate(DOCS.items()):
            if broken:  # the same ids, but every title and text is unrelated filler
                # (distinct per record: identical filler would be merged as near-duplicates)
                title, text = f"Notice {n}", " ".join(FILLER[(n + i) % 5] for i in range(3)) + (
                    f" Notice {n} is about room {n * 7 + 3} on floor {n % 9} of building {chr(65 + n % 26)}.")
            f.write(json.dumps({"_id": doc_id, "title": title, "text": text}) + "\n")


def write_dataset(root):
    os.makedirs(root / "qrels", exist_ok=True)
    write_corpus(root / "corpus.jsonl")
    with open(root / "queries.jsonl", "w", encoding="utf-8") as f:
        for q, text, _, _ in QUERIES:
            f.write(json.dumps({"_id": q, "text": text}) + "\n")
    with open(root / "qrels" / "test.tsv", "w", encoding="utf-8") as f:
        f.write("query-id\tcorpus-id\tscore\n")
        for q, _, rel, _ in QUERIES:
            f.writelines(f"{q}\t{d}\t{g}\n" for d, g in rel.items())
    with open(root / "answers.jsonl", "w", encoding="utf-8") as f:
        for q, text, _, spans in QUERIES:
            f.write(json.dumps({"id": q, "question": text, "answers": spans}) + "\n")
    return root


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return write_dataset(tmp_path_factory.mktemp("tiny-beir"))


@pytest.fixture(scope="module")
def gated(tiny, tmp_path_factory):
    """The good corpus indexed with the gate on; the report dir whose index/ it is."""
    from configs.schema import GateConfig, load_config
    from pipelines.index import run_index

    cfg = load_config(environ={})
    cfg = cfg.model_copy(update={"gate": GateConfig(dataset=str(tiny), metric="ndcg@10", stage="hybrid",
                                                    min=0.5, max_drop=0.2)})
    source = tmp_path_factory.mktemp("source")
    write_corpus(source / "corpus.jsonl")
    report_dir = tmp_path_factory.mktemp("report")
    index_dir = report_dir / "index"
    summary = run_index(cfg, str(source / "corpus.jsonl"), str(index_dir), progress=False, log=lambda *_: None)
    return cfg, source, report_dir, index_dir, summary


def _external_ndcg10(ranked: list[str], qrels: dict[str, int]) -> float:
    """trec_eval's ndcg_cut_10, written here independently of transforms.evaluation.metrics."""
    import math
    dcg = sum(qrels.get(d, 0) / math.log2(i + 2) for i, d in enumerate(ranked[:10]) if qrels.get(d, 0) > 0)
    ideal = sorted((g for g in qrels.values() if g > 0), reverse=True)[:10]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg else 0.0


def test_the_answer_file_reproduces_the_reports_final_ndcg(tiny, gated, tmp_path):
    """One engine: `ragbeam eval`'s final stage is what `ragbeam answer` writes, so a
    standard scorer over the answer file's retrieved_docs gets the report's nDCG@10."""
    from pipelines.cli import main

    _, _, report_dir, index_dir, _ = gated
    assert main(["eval", "--dataset", str(tiny), "--output", str(report_dir), "--quiet"]) == 0
    report = json.loads((report_dir / "report.json").read_text())
    out = tmp_path / "answers.jsonl"
    assert main(["answer", "--index", str(index_dir), "--questions", str(tiny / "queries.jsonl"),
                 "--output", str(out), "--quiet"]) == 0
    rows = {r["id"]: r for r in map(json.loads, out.read_text().splitlines())}
    qrels = {q: rel for q, _, rel, _ in QUERIES}
    # qrels name corpus.jsonl records by their own id: the answer file gives it as record_id
    scores = [_external_ndcg10([d["record_id"] for d in rows[q]["retrieved_docs"]], qrels[q]) for q in qrels]
    assert all(len({d["doc_id"] for d in r["retrieved_docs"]}) == len(r["retrieved_docs"]) == 10 for r in rows.values())
    assert sum(scores) / len(scores) == pytest.approx(report["stages"]["final"]["ndcg@10"], abs=1e-12)


class _Parser(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.external = [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        for k, v in attrs:
            if k in ("src", "href") and v and "://" in v:
                self.external.append(v)


def test_eval_cli_end_to_end(tiny, gated, capsys):
    from pipelines.cli import main

    _, _, report_dir, _, summary = gated
    # REPORT_DIR/index exists (built by the fixture), so eval reuses it instead of indexing again.
    rc = main(["eval", "--dataset", str(tiny), "--output", str(report_dir), "--quiet"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "ndcg@10" in out and "final" in out

    report = json.loads((report_dir / "report.json").read_text())
    assert report["index_version"] == summary["version"]
    assert report["counts"]["queries_evaluated"] == 6 and report["doc_ids_are"] == "doc_ids"
    for stage in ("bm25", "dense", "hybrid", "final"):
        m = report["stages"][stage]
        assert set(m) == {"ndcg@10", "recall@5", "recall@10", "recall@50", "recall@100", "mrr@10"}
        assert all(0.0 <= v <= 1.0 for v in m.values())
        if stage != "final":  # the final stage is the answer file's 10 documents
            assert m["recall@100"] == 1.0  # 30 documents: everything is retrieved
    assert report["stages"]["bm25"]["ndcg@10"] > 0.5
    assert report["stages"]["hybrid"]["ndcg@10"] > 0.5
    assert report["answers"]["gold_span_in_answer"] >= 0.5
    # answer-level figures (issue 34): status mix, right, calibration of the confidence
    mix = report["answer_status"]["counts"]
    assert set(mix) == {"answered", "not_found", "unsupported", "error"} and sum(mix.values()) == 6
    a, c = report["answers"], report["calibration"]
    assert 0.0 <= a["right"] <= min(a["right_page_cited"], a["gold_span_in_answer"])
    assert len(c["reliability"]) == 10 and sum(b["count"] for b in c["reliability"]) == c["questions"] == mix["answered"]
    assert c["score"] in ("confidence", "evidence_score", "confidence, evidence_score where a record has none")
    assert 0.0 <= c["ece"] <= 1.0 and "cites a gold page" in c["right_definition"]
    u = report["unanswerable"]
    assert u["gold_leaked"] == 0.0  # the mask really hid the gold documents
    assert u["auc_answerable_vs_unanswerable"] > 0.8

    rows = [json.loads(line) for line in (report_dir / "per_question.jsonl").read_text().splitlines()]
    assert [r["id"] for r in rows] == ["q1", "q2", "q3", "q4", "q5", "q6"]
    q2 = rows[1]
    assert q2["first_relevant_rank"]["hybrid"] == 1 and q2["in_context"] and q2["cited_relevant"]
    assert q2["gold_in_answer"] and q2["status"] == "answered"
    assert q2["right_page_cited"] and q2["right"] and "confidence" in q2
    assert q2["unanswerable"]["evidence_score"] < q2["evidence_score"]

    page = (report_dir / "report.html").read_text()
    p = _Parser()
    p.feed(page)
    p.close()
    assert p.tags.count("svg") >= 4 and not p.external and "<script" not in page
    assert "Answer-level figures and calibration" in page and "Answer status" in page


def test_gate_refuses_a_broken_version_and_keeps_the_live_one(gated):
    from pipelines.index import GateFailed, run_index
    from transforms.index import publish
    from transforms.ingest.embed import model_spec_from_config
    from transforms.query.engine import QAEngine
    from transforms.query.records import Question
    from transforms.records import record_id_of

    cfg, source, _, index_dir, summary = gated
    assert summary["gate"]["passed"] and summary["gate"]["new"] > 0.5
    live = publish.current_version(str(index_dir))
    assert live == summary["version"]

    write_corpus(source / "corpus.jsonl", broken=True)  # the source breaks overnight
    with pytest.raises(GateFailed) as e:
        run_index(cfg, str(source / "corpus.jsonl"), str(index_dir), progress=False, log=lambda *_: None)
    gate = e.value.gate
    assert not gate["passed"] and gate["new"] < 0.5 and gate["live"] > 0.5
    assert "refused" in str(e.value)
    assert publish.current_version(str(index_dir)) == live  # CURRENT did not move

    engine = QAEngine(publish.resolve_index(str(index_dir)), cfg, model_spec_from_config(cfg))
    try:
        [rec] = engine.answer_batch([Question("q2", QUERIES[1][1])], top_k=5)
    finally:
        engine.close()
    assert rec.status == "answered" and rec.index_version == live
    assert "80 degrees" in rec.answer and record_id_of(rec.retrieved[0]["doc_id"]) == "tea_1"


@pytest.fixture(scope="module")
def own_report(tiny, tmp_path_factory):
    """`ragbeam eval` on the tiny dataset into a report dir of its own: it indexes the
    corpus itself (REPORT_DIR/index), independent of every other test's fixtures."""
    from configs.schema import load_config
    from pipelines.eval import run_eval

    cfg = load_config(environ={})
    report_dir = tmp_path_factory.mktemp("own-report")
    report = run_eval(cfg, str(tiny), str(report_dir), unanswerable=False, log=lambda *_: None)
    return cfg, report_dir, report


def test_eval_pins_the_version_it_reads(tiny, own_report, monkeypatch, tmp_path):
    # ragbeam eval holds a read lease while it reads a version, as the answer job does: a nightly's
    # pruning leaves it whole; the lease is gone once the report is written
    from pipelines import eval as eval_job
    from transforms.index import layout
    cfg, report_dir, _ = own_report
    index_dir = str(report_dir / "index")
    seen = []
    real = eval_job.Evaluator

    def watching(version_dir, *a, **k):
        seen.append(layout.leased_versions(index_dir))
        return real(version_dir, *a, **k)
    monkeypatch.setattr(eval_job, "Evaluator", watching)
    report = eval_job.run_eval(cfg, str(tiny), str(tmp_path / "r"), index=index_dir, max_queries=2,
                               unanswerable=False, log=lambda *_: None)
    assert seen == [{report["index_version"]}]
    assert layout.leased_versions(index_dir) == set()


def test_gate_metric_matches_the_eval_report(tiny, own_report):
    from configs.schema import GateConfig
    from transforms.evaluation.evaluator import gate_metric
    from transforms.index import publish

    cfg, report_dir, report = own_report
    version_dir = publish.resolve_index(str(report_dir / "index"))
    assert os.path.basename(version_dir) == report["index_version"]
    assert json.loads((report_dir / "report.json").read_text())["stages"] == report["stages"]
    g = GateConfig(dataset=str(tiny), metric="recall@5", stage="bm25", max_questions=3)
    assert gate_metric(version_dir, cfg, g) == 1.0
    # The gate scores with the same code as the report (dense is below 1 here: not a constant).
    g = GateConfig(dataset=str(tiny), metric="ndcg@10", stage="dense")
    assert gate_metric(version_dir, cfg, g) == pytest.approx(report["stages"]["dense"]["ndcg@10"])


def test_doc_labels_by_path_for_a_folder_corpus(tmp_path):
    """A docs/ corpus: qrels name files by path (the documents' key); a copy of the same
    content is one indexed document that every copy's path names."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from transforms.evaluation.datasets import DocLabels

    (tmp_path / "documents").mkdir()
    rows = [{"doc_id": "d1", "key": "man/ls.1", "source_uri": "/data/docs/man/ls.1", "source_uris": ["/data/docs/man/ls.1"]},
            {"doc_id": "d2", "key": "git/a.html", "source_uri": "/data/docs/git/a.html",
             "source_uris": ["/data/docs/git/a.html", "/data/docs/mirror/git/a.html"]}]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "documents" / "part-0.parquet")
    labels = DocLabels(str(tmp_path), {"man/ls.1", "mirror/git/a.html", "gone.txt"})
    assert labels.by_key
    assert labels.doc_qrels({"man/ls.1": 1, "mirror/git/a.html": 2, "gone.txt": 1}) == \
        {"d1": 1, "d2": 2, ("missing", "gone.txt"): 1}
    # the missing judged file still counts against recall
    assert M.recall_at_k(["d1", "d2"], labels.doc_qrels({"man/ls.1": 1, "gone.txt": 1}), 10) == 0.5


def test_candidates_carry_fixed_scale_scores_and_evidence_is_a_probability(gated):
    """The engine gives each candidate its cosine and its BM25 coverage (BM25 over the query's
    best possible score); the extractive answerer's evidence model turns them into the
    probability that the chunks answer the question, refusing an off-topic one."""
    import numpy as np

    from transforms.index import publish
    from transforms.ingest.embed import model_spec_from_config
    from transforms.query.engine import QAEngine
    from transforms.query.records import Question

    cfg, _, _, index_dir, _ = gated
    engine = QAEngine(publish.resolve_index(str(index_dir)), cfg, model_spec_from_config(cfg))
    try:
        qs = [Question("q2", QUERIES[1][1]), Question("off", "Who won the 1987 Tour de France cycling race?")]
        qv = engine.embedder.encode([q.question for q in qs])
        qn = qv / np.linalg.norm(qv, axis=1, keepdims=True)
        (seg,) = engine.searchers  # one segment: local rows are chunk numbers
        terms_of, _ = engine.analyze([q.question for q in qs])
        for j, cands in enumerate(engine.retrieve(qs)):
            tids = np.array(sorted(seg.vocab[t] for t in terms_of[j] if t in seg.vocab), np.int64)
            # the bound: each query term's best weight in any chunk, or the unseen-term weight
            from transforms.query.segment_search import unseen_term_weight
            bound = sum(float(seg.term_max[seg.vocab[t]]) if t in seg.vocab else unseen_term_weight(engine.num_docs)
                        for t in terms_of[j])
            # every chunk the answerer may see has them (the rest of the list is not scored)
            assert engine.scored_head == cfg.answer.top_chunks and len(cands) > engine.scored_head
            assert all(c.dense_cosine is None for c in cands[engine.scored_head:])
            for c in cands[:engine.scored_head]:
                assert c.dense_cosine == pytest.approx(float(seg.vectors[c.chunk_no] @ qn[j]), abs=1e-5)
                want = seg.bm25_of(tids, np.array([c.chunk_no]))[0] / bound if bound else 0.0
                assert c.bm25_coverage == pytest.approx(want, abs=1e-6) and 0.0 <= c.bm25_coverage <= 1.0 + 1e-6
        on, off = engine.answer_batch(qs, top_k=5)
    finally:
        engine.close()
    threshold = cfg.evidence_threshold
    assert on.status == "answered" and threshold <= on.evidence_score <= 1.0
    assert off.status == "not_found" and 0.0 <= off.evidence_score < threshold
