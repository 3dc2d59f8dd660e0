"""Beam counters and the dead-letter tag: one namespace for every stage, read back once."""
from __future__ import annotations

from apache_beam.metrics import Metrics

NAMESPACE = "ragbeam"
DEAD_LETTER = "dead_letter"  # the tagged output every stage sends its failures to


def counter(name: str):
    return Metrics.counter(NAMESPACE, name)


def read_counters(result) -> dict[str, int]:
    """The run's counters by name (committed where the runner has them, else attempted)."""
    from apache_beam.metrics.metric import MetricsFilter

    out: dict[str, int] = {}
    for c in result.metrics().query(MetricsFilter().with_namespace(NAMESPACE))["counters"]:
        out[c.key.metric.name] = out.get(c.key.metric.name, 0) + (c.committed or c.attempted or 0)
    return out
