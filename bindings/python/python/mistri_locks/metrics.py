"""Prometheus metrics of a mistri_locks handle.

``Collector(locks)`` is a ``prometheus_client`` custom collector::

    from prometheus_client import REGISTRY
    REGISTRY.register(mistri_locks.metrics.Collector(locks))

It reads the handle's counters (``locks.stats()``) at each scrape and yields
the same families as every other face (docs/OPERATING.md has the table):
``mistri_locks_holds_active``, ``mistri_locks_acquisitions_total{outcome}``,
``mistri_locks_holds_lost_total{cause}``, … No key label.

``prometheus_client`` is optional: it is imported when a Collector is made.
:func:`text` needs nothing and returns the Prometheus text itself.
"""

from __future__ import annotations

from typing import Any, Dict, Iterator, List, Tuple

from . import _native
from ._native import Locks

__all__ = ["Collector", "text"]


def text(locks: Locks) -> str:
    """The handle's counters in the Prometheus text format."""
    if not isinstance(locks, Locks):
        raise TypeError("locks must be a mistri_locks handle (Memory(), Redis(…), …)")
    return _native._stats_prometheus(locks)


def _families(exposition: str) -> List[Tuple[str, str, str, List[Tuple[Dict[str, str], float]]]]:
    """(name, type, help, [(labels, value)]) of every family in the text."""
    families: List[Tuple[str, str, str, List[Tuple[Dict[str, str], float]]]] = []
    helps: Dict[str, str] = {}
    for line in exposition.splitlines():
        if line.startswith("# HELP "):
            name, _, doc = line[7:].partition(" ")
            helps[name] = doc
        elif line.startswith("# TYPE "):
            name, _, kind = line[7:].partition(" ")
            families.append((name, kind, helps.get(name, ""), []))
        elif line and families:
            series, _, value = line.rpartition(" ")
            labels: Dict[str, str] = {}
            if "{" in series:
                inner = series[series.index("{") + 1 : -1]
                for pair in inner.split(","):
                    k, _, v = pair.partition("=")
                    labels[k] = v.strip('"')
            families[-1][3].append((labels, float(value)))
    return families


class Collector:
    """A prometheus_client collector of one handle's counters."""

    def __init__(self, locks: Locks) -> None:
        if not isinstance(locks, Locks):
            raise TypeError("locks must be a mistri_locks handle (Memory(), Redis(…), …)")
        try:
            import prometheus_client.core  # noqa: F401
        except ImportError as e:  # pragma: no cover - depends on the host
            raise ImportError(
                "mistri_locks.metrics.Collector needs prometheus_client (pip install prometheus-client)"
            ) from e
        self._locks = locks

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        for name, kind, doc, samples in _families(text(self._locks)):
            label_names = sorted({k for labels, _ in samples for k in labels})
            if kind == "counter":
                # prometheus_client adds _total itself.
                family: Any = CounterMetricFamily(name[: -len("_total")], doc, labels=label_names)
            else:
                family = GaugeMetricFamily(name, doc, labels=label_names)
            for labels, value in samples:
                family.add_metric([labels[k] for k in label_names], value)
            yield family

    def describe(self) -> Iterator[Any]:
        return iter(())
