"""Prometheus text exposition (format 0.0.4) for nsqd, nsqlookupd and nsqadmin ``/metrics``.

Upstream NSQ has no native Prometheus endpoint (its users run exporters that poll ``/stats``);
here each daemon serves one on its HTTP port unless started with ``--metrics=false``.

A node with thousands of topics and channels produces hundreds of thousands of samples, and a
scrape runs on the daemon's event loop, so the per-topic/per-channel families are written
straight into text by :class:`Exposition` (one f-string per sample, no object per sample)
instead of through ``prometheus_client``'s ``Metric``/``Sample`` objects. The well-kept library
still provides what it does best: the standard ``process_*`` and ``python_*`` families
(:func:`process_metrics`), and the tests parse our output with its parser and with ``promtool``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aiohttp import web

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def escape_label(value: str) -> str:
    """Label values escape ``\\``, ``"`` and newline (topic/channel names never need it)."""
    if "\\" in value or '"' in value or "\n" in value:
        return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return value


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def format_value(value: float | int | bool) -> str:
    """Integers as integers; floats in Go's/Prometheus' spelling for the special values."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(value)


def labels(**pairs: str) -> str:
    """``{a="x",b="y"}`` with values escaped; ``""`` for no labels."""
    if not pairs:
        return ""
    return "{" + ",".join(f'{k}="{escape_label(str(v))}"' for k, v in pairs.items()) + "}"


class Family:
    """One metric family: its HELP/TYPE header and its sample lines, kept together as the text
    format requires even when the samples are produced interleaved with other families'."""

    __slots__ = ("name", "kind", "help", "lines")

    def __init__(self, name: str, kind: str, help_text: str) -> None:
        self.name = name
        self.kind = kind
        self.help = help_text
        self.lines: list[str] = []

    def add(self, label_text: str, value: float | int | bool, suffix: str = "") -> None:
        """A sample; ``label_text`` is a ready ``{...}`` string (see :func:`labels`)."""
        text = str(value) if type(value) is int else format_value(value)  # ints: the hot case
        self.lines.append(f"{self.name}{suffix}{label_text} {text}\n")


class Exposition:
    """An ordered set of families rendered as one text document."""

    def __init__(self) -> None:
        self.families: list[Family] = []
        self.extra: list[bytes] = []

    def family(self, name: str, kind: str, help_text: str) -> Family:
        fam = Family(name, kind, help_text)
        self.families.append(fam)
        return fam

    def gauge(self, name: str, help_text: str) -> Family:
        return self.family(name, "gauge", help_text)

    def counter(self, name: str, help_text: str) -> Family:
        """``name`` must end in ``_total`` (the sample name, as promtool expects)."""
        return self.family(name, "counter", help_text)

    def single(self, name: str, kind: str, help_text: str, value: float | int | bool,
               label_text: str = "") -> None:
        self.family(name, kind, help_text).add(label_text, value)

    def render(self) -> bytes:
        parts: list[str] = []
        for fam in self.families:
            if not fam.lines:
                continue  # an empty family is legal but only noise
            parts.append(f"# HELP {fam.name} {_escape_help(fam.help)}\n# TYPE {fam.name} {fam.kind}\n")
            parts.extend(fam.lines)
        return "".join(parts).encode() + b"".join(self.extra)


_PROCESS_REGISTRY = None


def process_metrics() -> bytes:
    """``process_*`` (CPU, memory, fds, start time), ``python_gc_*`` and ``python_info`` from
    ``prometheus_client``'s own collectors, in a private registry (never the global one, so an
    embedding application's metrics are not mixed into ours)."""
    global _PROCESS_REGISTRY
    from prometheus_client import (
        CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector, generate_latest,
    )

    if _PROCESS_REGISTRY is None:
        registry = CollectorRegistry(auto_describe=False)
        ProcessCollector(registry=registry)
        PlatformCollector(registry=registry)
        GCCollector(registry=registry)
        _PROCESS_REGISTRY = registry
    return generate_latest(_PROCESS_REGISTRY)



def http_response(body: bytes) -> "web.Response":
    """A scrape's answer with the text format's content type (aiohttp's ``content_type``
    argument cannot carry the ``version`` parameter Prometheus looks at)."""
    from aiohttp import web

    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})
