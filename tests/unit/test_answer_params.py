"""The extractive answerer's parameters: every SentenceParams field has exactly one home, the
config's answer section or the embedding profile's fit, and the values in force are the ones
engine.py built field by field before answer_params (pinned below, dumped at e7ff7b9)."""
import dataclasses

import pytest

from configs.schema import DEFAULT_CONFIG, AnswerConfig, Config, load_config
from transforms.ingest.profiles import PROFILES, ScoreFit
from transforms.query.answer_params import answer_params, fit_name, param_sources
from transforms.query.extract import SentenceParams
from transforms.query.selection import load_model

# the same under every profile: the config's defaults (configs/schema.py AnswerConfig)
FROM_CONFIG = dict(top_chunks=5, gap=0.12, conflict_gap=0.15, rank_weight=0.0, mmr_lambda=1.0, dup_sim=0.95,
                   type_weight=0.1, same_source_bonus=0.1, form_filter=True, restate_overlap=0.8, call_lexical=True,
                   call_chunks=30, call_definitions_alone=8, evidence_lexical_weight=0.5, read_chunks=20)
MINILM = dict(max_sentences=3, lexical_weight=0.7, evidence_model=(6.447, 9.113, 7.912, -11.48),
              fusion=(0.82, None, "bound"))
BGE = dict(max_sentences=2, lexical_weight=0.3, evidence_model=(6.896, 20.629, 8.743, -22.214),
           fusion=(0.85, 0.4, "floor"))
E5 = dict(max_sentences=2, lexical_weight=0.3, evidence_model=(7.47, 59.74, 8.269, -59.584), fusion=(1.0, 0.7, "bound"))
SHIPPED = "answer_model.json"  # transforms/query/answer_model.json: MiniLM's fitted selection

# (profile, answer section) -> (fitted values, threshold, evidence model on, answer_model, confidence_model)
PINNED = {}
for _name in (None, "minilm", "fast", "minilm-q8"):
    PINNED[(_name, "-")] = (MINILM, 0.34, True, None, SHIPPED)
    PINNED[(_name, "evidence=sentence")] = (MINILM, 0.58, False, None, SHIPPED)
    # the fitted selection's threshold is the shipped model's own (refitted with it: make answer-model)
    PINNED[(_name, "selection=model")] = (MINILM, load_model(SHIPPED).threshold, True, SHIPPED, None)
for _name, _fit, _threshold in (("bge-small", BGE, 0.28), ("e5-small", E5, 0.25)):
    PINNED[(_name, "-")] = (_fit, _threshold, True, None, None)
    PINNED[(_name, "evidence=sentence")] = (_fit, 0.58, False, None, None)
    PINNED[(_name, "selection=model")] = (_fit, _threshold, True, None, None)  # no model fitted: the rules


def config(profile, answer):
    section = dict(kv.split("=") for kv in answer.split(",")) if answer != "-" else {}
    return Config.model_validate({"embed": {"profile": profile}, "answer": section})


@pytest.mark.parametrize("profile, answer", sorted(PINNED, key=str))
def test_the_values_in_force_are_the_ones_the_engine_built_by_hand(profile, answer):
    fitted, threshold, evidence_on, answer_model, confidence_model = PINNED[(profile, answer)]
    cfg = config(profile, answer)
    p = answer_params(cfg)
    assert {k: getattr(p, k) for k in FROM_CONFIG} == FROM_CONFIG
    assert (p.max_sentences, p.lexical_weight, p.threshold) == (fitted["max_sentences"], fitted["lexical_weight"],
                                                                threshold)
    assert p.evidence_model == (fitted["evidence_model"] if evidence_on else None)
    assert p.answer_model is (load_model(answer_model) if answer_model else None)
    assert p.confidence_model is (load_model(confidence_model) if confidence_model else None)
    assert (cfg.fusion_alpha, cfg.fusion_alpha_min, cfg.fusion_norm) == fitted["fusion"]
    # what manifests, reports and resume fingerprints record reads the same values
    assert (cfg.evidence_threshold, cfg.max_sentences, cfg.lexical_weight, cfg.evidence_model, cfg.answer_model,
            cfg.confidence_model) == (p.threshold, p.max_sentences, p.lexical_weight, p.evidence_model,
                                      p.answer_model, p.confidence_model)


def test_the_shipped_default_config_answers_like_the_schemas_defaults():
    assert answer_params(load_config(DEFAULT_CONFIG, environ={})) == answer_params(Config())


def test_every_answer_parameter_has_exactly_one_home():
    """A field is the config's (answer.<name>, with a default) or the fit's (ScoreFit, which a
    same-named answer key only overrides: null by default), never both, never neither."""
    answer_keys, fit_keys = AnswerConfig.model_fields, {f.name for f in dataclasses.fields(ScoreFit)}
    for name, home in param_sources().items():
        in_config = name in answer_keys and answer_keys[name].default is not None
        in_fit = fit_name(name) in fit_keys
        assert in_config != in_fit, f"SentenceParams.{name}: config {in_config}, fit {in_fit}"
        assert home == ("fit" if in_fit else "config")
        if in_fit and name in answer_keys:
            assert answer_keys[name].default is None, f"answer.{name} would hide the profile's fit"
    assert set(param_sources()) == {f.name for f in dataclasses.fields(SentenceParams)}


def test_a_set_key_overrides_the_fit_and_the_rest_stay():
    p = answer_params(config("bge-small", "max_sentences=4,lexical_weight=0.2,threshold=0.5,gap=0.3"))
    assert (p.max_sentences, p.lexical_weight, p.threshold, p.gap) == (4, 0.2, 0.5, 0.3)
    assert p.evidence_model == BGE["evidence_model"] and p.top_chunks == FROM_CONFIG["top_chunks"]


def test_every_profile_names_all_of_its_fit():
    """No ScoreFit field has a default: a profile without its own numbers cannot inherit another's silently."""
    assert all(f.default is dataclasses.MISSING for f in dataclasses.fields(ScoreFit))
    with pytest.raises(TypeError):
        ScoreFit()
    assert PROFILES["minilm-q8"].fit is PROFILES["minilm"].fit  # the same weights re-quantized, not refitted
