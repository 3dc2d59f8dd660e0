"""The eval gate of the nightly job: evaluate the staged version before it is published."""
from __future__ import annotations

from typing import Optional

from configs.schema import Config


def check_gate(cfg: Config, staged_dir: str, index_dir: str, live_dir: Optional[str], log=print) -> Optional[dict]:
    """None when no gate is configured; else {"passed": bool, "message": str, ...}."""
    if cfg.gate is None:
        return None
    from transforms.evaluation.evaluator import gate_metric

    g = cfg.gate
    new = gate_metric(staged_dir, cfg, g)
    result = {"metric": g.metric, "stage": g.stage, "new": new, "passed": True}
    problems = []
    if g.min is not None and new < g.min:
        problems.append(f"{g.stage} {g.metric} {new:.4f} is below the floor {g.min:.4f}")
    if g.max_drop is not None and live_dir is not None:
        live = gate_metric(live_dir, cfg, g)
        result["live"] = live
        if new < live - g.max_drop:
            problems.append(f"{g.stage} {g.metric} {new:.4f} is worse than the live version's "
                            f"{live:.4f} by more than {g.max_drop:.4f}")
    if problems:
        result["passed"] = False
        result["message"] = "eval gate refused the new version: " + "; ".join(problems)
    else:
        result["message"] = f"eval gate passed: {g.stage} {g.metric} {new:.4f}"
    log(result["message"])
    return result
