"""The llm judge's bookkeeping (transforms/evaluation/judge.py) with scripted judges: what is
counted, what is left out, and the control claims that show a judge which cannot judge. The
real model judges in tests/integration/test_llm_features.py."""
from transforms.evaluation.judge import Judge, judge_report, verdict

SRC_A = "The Normans gave their name to Normandy, a region in France. They descended from Norse raiders."
SRC_B = "Photosynthesis turns light into chemical energy. It takes place in the chloroplasts."
ITEMS = [("Who gave their name to Normandy?", "The Normans gave their name to Normandy [1].", {1: SRC_A}),
         ("Where does photosynthesis take place?", "It takes place in the chloroplasts. [1] Light. [2]",
          {1: SRC_B, 2: SRC_A})]


class Lexical:
    """Says yes when the claim's words are all in the source: a judge that can tell."""
    def complete(self, system, user):
        if "Claim:" not in user:
            return "Yes."
        source, claim = user.split("Source:\n", 1)[1].split("\n\nClaim: ", 1)
        words = [w.strip(".,").lower() for w in claim.split("\n\n")[0].split()]
        return "Yes" if all(w in source.lower() for w in words) else "No, it does not."


class AlwaysNo:
    def complete(self, system, user):
        return "The source does not support the claim."


def test_verdicts_are_read_from_the_first_word_or_a_plain_statement():
    assert verdict("Yes.") is True and verdict(" no, because") is False
    assert verdict("The source does not support the claim.") is False
    assert verdict("The source supports the claim.") is True
    assert verdict("Maybe.") is None and verdict("") is None


def test_a_judge_that_can_tell_passes_its_controls():
    judged = Judge(Lexical(), concurrency=2).judge(ITEMS)
    assert [j.claims for j in judged] == [1, 2]
    assert judged[0].faithfulness == 1.0 and judged[1].faithfulness == 0.5  # "Light." is not in source 2
    r = judge_report(judged, "m")
    assert r["controls"]["judged"] == 4 and r["controls"]["right"] == 1.0 and r["reliable"] is True
    assert r["faithfulness"] == 0.75 and r["answer_relevance"] == 1.0


def test_a_judge_that_says_no_to_everything_is_marked_unreliable():
    r = judge_report(Judge(AlwaysNo()).judge(ITEMS), "m")
    assert r["faithfulness"] == 0.0 and r["unparsed_verdicts"] == 0
    assert r["controls"]["right_on_supported"] == 0.0 and r["controls"]["right_on_unsupported"] == 1.0
    assert r["reliable"] is False
