"""When the top sources give different numbers for what is asked (a forum's 99 bar against the
manual's 12 bar), the answer says so: `conflicts` lists the competing quotes and sources."""
import json

import pytest

from pipelines.answer import run_answer
from pipelines.index import run_index
from tests.integration.test_incremental import quiet

MANUAL = """# AquaPump 300 manual

## Operating limits

The maximum operating pressure of the AquaPump 300 is 12 bar. Never run the pump above it.
The AquaPump 300 weighs 7 kg without water.
"""
FORUM = """AquaPump 300 owners forum, thread 41.

I run my AquaPump 300 at a maximum operating pressure of 99 bar and it works fine for me.
"""


@pytest.fixture(scope="module")
def answers(test_config, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("conflicts")
    (tmp / "docs" / "forum").mkdir(parents=True)
    (tmp / "docs" / "manual.md").write_text(MANUAL)
    (tmp / "docs" / "forum" / "post.txt").write_text(FORUM)
    run_index(test_config, str(tmp / "docs"), str(tmp / "index"), progress=False, log=quiet)
    questions = tmp / "q.jsonl"
    questions.write_text(json.dumps({"id": "pressure", "question": "What is the maximum operating pressure of "
                                     "the AquaPump 300?"}) + "\n"
                         + json.dumps({"id": "weight", "question": "How much does the AquaPump 300 weigh?"}) + "\n")
    run_answer(test_config, str(tmp / "index"), str(questions), str(tmp / "a.jsonl"), progress=False, log=quiet)
    return {r["id"]: r for r in map(json.loads, (tmp / "a.jsonl").read_text().splitlines())}


def test_competing_values_are_listed_with_their_sources(answers):
    r = answers["pressure"]
    assert r["status"] == "answered"
    values = {v for c in r["conflicts"] for v in c["values"]}
    assert values == {"12 bar", "99 bar"}
    sources = {c["source"].rsplit("/", 1)[-1] for c in r["conflicts"]}
    assert sources == {"manual.md", "post.txt"}
    cited = {c["source"] for c in r["citations"]}
    assert r["conflicts"][0]["source"] in cited  # the answer's own quote comes first
    assert all(c["quote"] and c["doc_id"] for c in r["conflicts"])


def test_no_conflict_when_the_sources_agree_or_say_nothing(answers):
    r = answers["weight"]
    assert r["status"] == "answered" and "7 kg" in r["answer"]
    assert r["conflicts"] == []
