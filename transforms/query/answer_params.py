"""The extractive answerer's parameters in force, each SentenceParams field from its one home.

- the config: `answer.<field>`, whose default is in configs/schema.py (AnswerConfig);
- the embedding profile's fit: `ScoreFit.<field>` (transforms/ingest/profiles.py), fitted on
  that model's scores; a same-named `answer.<field>` (null by default) overrides it when set.

Fields are mapped by name, never copied one by one; then answer.evidence and answer.selection
switch the fitted models on or off. tests/test_answer_params.py checks that every field has
exactly one home.
"""
from __future__ import annotations

from dataclasses import fields

from transforms.ingest.profiles import ScoreFit
from transforms.query.extract import SentenceParams

# SentenceParams fields that the fit holds under another name
FIT_NAMES = {"threshold": "evidence_threshold", "confidence_model": "answer_model"}
_FITTED = frozenset(f.name for f in fields(ScoreFit))


def fit_name(param: str):
    """The ScoreFit field a SentenceParams field is fitted as, or None: the config's."""
    name = FIT_NAMES.get(param, param)
    return name if name in _FITTED else None


def param_sources() -> dict[str, str]:
    """Each SentenceParams field's home: "fit" (the profile's ScoreFit) or "config" (answer.<field>)."""
    return {f.name: "fit" if fit_name(f.name) else "config" for f in fields(SentenceParams)}


def answer_params(cfg) -> SentenceParams:
    """The SentenceParams the answer job uses under `cfg` (a configs.schema.Config)."""
    a, fit = cfg.answer, cfg.score_fit
    values = {}
    for name, home in param_sources().items():
        if home == "config":
            values[name] = getattr(a, name)
        else:
            own = getattr(a, name, None)
            values[name] = getattr(fit, fit_name(name)) if own is None else own
    return SentenceParams(**_switched(values, a))


def _switched(values: dict, a) -> dict:
    """What answer.evidence and answer.selection turn on or off; the threshold's default
    follows what decides "not found" (each score has its own scale)."""
    from transforms.query.selection import load_model
    fitted = load_model(values["answer_model"]) if values["answer_model"] else None  # a file name in the fit
    values["answer_model"] = fitted if a.selection == "model" else None
    values["confidence_model"] = fitted if a.selection == "rules" else None
    if a.evidence != "model":
        values["evidence_model"] = None
    if a.threshold is None:
        if values["answer_model"] is not None:  # confidence units
            values["threshold"] = values["answer_model"].threshold
        elif a.evidence != "model":
            values["threshold"] = a.SENTENCE_THRESHOLD
    return values
