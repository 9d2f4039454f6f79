"""Suite name -> parser. The CRD schema's list of suites is checked against this by a test."""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module
from typing import cast

from benchfarm.api.outcomes import RunFailure
from benchfarm.errors import ParseError, RunError
from benchfarm.suites.base import Metric

Parser = Callable[[str, dict[str, str] | None], list[Metric]]

_MODULES = {
    "cyclictest": "cyclictest", "shell": "shell", "hackbench": "hackbench", "openssl": "openssl",
    "stress-ng": "stressng", "sysbench": "sysbench", "mbw": "mbw", "fio": "fio",
    "iperf3": "iperf3", "dd": "dd", "boot-time": "boottime", "lmbench": "lmbench",
    "dhrystone": "dhrystone", "whetstone": "whetstone", "linpack": "linpack", "nbench": "nbench",
    "stream": "stream", "coremark": "coremark", "coremark-pro": "coremarkpro", "7zip": "sevenzip",
    "glmark2": "fps", "fps": "fps", "console-timing": "consoletiming", "netperf": "netperf",
    "alsa": "alsa", "multibench": "multibench", "ne10": "ne10", "dmatest": "dmatest",
}


def names() -> list[str]:
    return sorted(_MODULES)


def parser(suite: str) -> Parser:
    if suite not in _MODULES:
        raise RunError(f"unknown suite {suite!r}; known suites: {', '.join(names())}",
                       reason=RunFailure.unknown_suite)
    return cast(Parser, import_module(f"{__package__}.{_MODULES[suite]}").parse)


def parse(suite: str, text: str, params: dict[str, str] | None = None) -> list[Metric]:
    """Parse one suite's output; empty output is a parse error, never zero metrics silently."""
    if suite != "shell" and not text.strip():
        raise ParseError(suite, "empty output")
    try:
        return _figures(suite, parser(suite)(text, params or {}))
    except ParseError as exc:
        if exc.suite == suite:
            raise
        # a shared parser (glmark2 -> fps): name the suite the plan asked for
        message = str(exc).removeprefix(f"{exc.suite}: ")
        if exc.line is not None:
            message = message.removesuffix(f" (line {exc.line})")
        raise ParseError(suite, message, line=exc.line) from exc


def _figures(suite: str, metrics: list[Metric]) -> list[Metric]:
    """The metrics, each a finite number (a JSON output's 1e999 is inf, its "12" a string)."""
    for m in metrics:
        if isinstance(m.value, bool) or not isinstance(m.value, (int, float)) or \
                not -1e300 < m.value < 1e300:
            raise ParseError(suite, f"{m.name[:80]}: its value is no finite number")
    return metrics


def check_parameters(suite: str, params: dict[str, str]) -> str | None:
    """A suite's own check of its parameters at admission (e.g. a user regex); None if fine."""
    check = getattr(import_module(f"{__package__}.{_MODULES[suite]}"), "check", None) \
        if suite in _MODULES else None
    return check(params) if check is not None else None
