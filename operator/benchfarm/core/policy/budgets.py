"""What a run's output may cost the lab: how many metrics it yields and how big each one is.

A parser's metrics come from what the board printed, so their number and their names are the
tenant's choice (console-timing's pattern, stress-ng's and fps's rows): 50,000 printed lines made
100,000 metrics in one metrics.json, which the indexer, the campaign publisher, every export and
the dashboard load whole. The session checks each step's metrics here before it checkpoints them;
the step that goes past the run's LabPolicy `maxMetricsPerRun`, or a metric bigger than any real
suite's, fails the run (TooManyMetrics) and none of the run's metrics are kept. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence

from benchfarm.suites.base import Metric

MAX_NAME = 200          # characters of a metric's name (real suites' longest: under 80)
MAX_UNIT = 32           # characters of its unit
MAX_LABELS = 16         # labels of one metric
MAX_LABEL_KEY = 63
MAX_LABEL_VALUE = 256
SHOWN = 60              # characters of a tenant's name a message quotes


def _shown(text: str) -> str:
    return repr(text[:SHOWN] + ("…" if len(text) > SHOWN else ""))


def oversized(metric: Metric) -> str | None:
    """What is too big about one metric (None: nothing)."""
    if len(metric.name) > MAX_NAME:
        return f"metric name {_shown(metric.name)} is {len(metric.name)} characters (at most " \
               f"{MAX_NAME})"
    if len(metric.unit) > MAX_UNIT:
        return f"metric {_shown(metric.name)} has a unit of {len(metric.unit)} characters (at " \
               f"most {MAX_UNIT})"
    if len(metric.labels) > MAX_LABELS:
        return f"metric {_shown(metric.name)} has {len(metric.labels)} labels (at most " \
               f"{MAX_LABELS})"
    for key, value in metric.labels.items():
        if len(key) > MAX_LABEL_KEY or len(value) > MAX_LABEL_VALUE:
            return f"metric {_shown(metric.name)} has a label {_shown(key)} longer than " \
                   f"{MAX_LABEL_KEY} characters or a value longer than {MAX_LABEL_VALUE}"
    return None


def over_budget(step: str, metrics: Sequence[Metric], *, count: int, used: int,
                cap: int) -> str | None:
    """Why step `step`'s metrics may not be kept (None: they may). `count`: how many its parse
    yielded (`metrics` may hold only the first of them: `cap - used + 1` are enough to tell);
    `used`: the metrics the run's earlier steps yielded; `cap`: the LabPolicy's
    maxMetricsPerRun for the run's namespace."""
    if used + count > cap:
        return (f"step {step} yielded {count} metrics; with the {used} of the run's earlier "
                f"steps that is more than the {cap} a run of this namespace may yield (LabPolicy "
                f"maxMetricsPerRun); none of the run's metrics are kept")
    for metric in metrics:
        problem = oversized(metric)
        if problem is not None:
            return f"step {step}: {problem}; none of the run's metrics are kept"
    return None
