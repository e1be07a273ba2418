"""Just enough PromQL reading to list the metric names an expression uses."""

from __future__ import annotations

import re

from prometheus_client import CollectorRegistry

FUNCTIONS_AND_KEYWORDS = {
    "sum",
    "max",
    "min",
    "avg",
    "count",
    "rate",
    "irate",
    "increase",
    "histogram_quantile",
    "absent",
    "time",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "and",
    "or",
    "unless",
    "bool",
    "offset",
    "topk",
    "bottomk",
    "clamp_min",
    "clamp_max",
    "max_over_time",
    "min_over_time",
    "avg_over_time",
    "label_replace",
    "vector",
    "scalar",
    "changes",
    "delta",
    "deriv",
    "sort",
    "sort_desc",
    "timestamp",
    "absent_over_time",
}


def metric_names(expr: str) -> set[str]:
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # strings
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)  # range selectors
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", r"\1", text)
    names = set(re.findall(r"(?<![\w$.])([a-zA-Z_:][a-zA-Z0-9_:]*)", text))
    return {n for n in names if n not in FUNCTIONS_AND_KEYWORDS}


SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "gauge": ("",),
    "summary": ("_sum", "_count", "_created", ""),
    "info": ("_info",),
}


def exported_names(registry: CollectorRegistry) -> set[str]:
    """Every series name the registry can expose (families with no children yet included)."""
    names: set[str] = set()
    for family in registry.collect():
        names.update(family.name + suffix for suffix in SUFFIXES.get(family.type, ("",)))
    return names
