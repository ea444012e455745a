"""Rolling end-to-end latency quantiles (``--e2e-processing-latency-percentile``).

Upstream keeps two biased-quantile streams each covering half the window and resets the older
one every half window. We keep the same coarse rolling window with two bounded reservoirs of
samples (uniform reservoir sampling), which costs O(1) per FIN and a sort per stats request.
"""

from __future__ import annotations

import time
from typing import Callable

_RESERVOIR = 2048
#: ``random.randrange``, bound when the first stream is made (an nsqd without
#: ``--e2e-processing-latency-percentile`` never loads :mod:`random`)
_randrange: Callable[[int], int] | None = None


class _Reservoir:
    __slots__ = ("samples", "seen")

    def __init__(self) -> None:
        self.samples: list[int] = []
        self.seen = 0

    def add(self, value: int) -> None:
        self.seen += 1
        if len(self.samples) < _RESERVOIR:
            self.samples.append(value)
        else:
            j = _randrange(self.seen)  # type: ignore[misc]
            if j < _RESERVOIR:
                self.samples[j] = value


class LatencyQuantiles:
    """Latency samples in ns over a rolling window; ``result()`` gives upstream's JSON shape."""

    __slots__ = ("percentiles", "half_window", "_current", "_previous", "_rotated_at")

    def __init__(self, percentiles: list[float], window_seconds: float) -> None:
        global _randrange
        if _randrange is None:
            from random import randrange

            _randrange = randrange
        self.percentiles = percentiles
        self.half_window = max(window_seconds / 2.0, 0.001)
        self._current = _Reservoir()
        self._previous = _Reservoir()
        self._rotated_at = time.monotonic()

    def _maybe_rotate(self) -> None:
        now = time.monotonic()
        if now - self._rotated_at >= self.half_window:
            self._previous = self._current if now - self._rotated_at < 2 * self.half_window else _Reservoir()
            self._current = _Reservoir()
            self._rotated_at = now

    def add(self, latency_ns: int) -> None:
        self._maybe_rotate()
        self._current.add(latency_ns)

    def samples(self) -> tuple[list[int], int]:
        self._maybe_rotate()
        return (self._current.samples + self._previous.samples,
                self._current.seen + self._previous.seen)

    def result(self) -> dict:
        return merged_result([self], self.percentiles)


def merged_result(streams: list["LatencyQuantiles"], percentiles: list[float]) -> dict:
    """``{"count": N, "percentiles": [{"quantile": q, "value": ns}, ...]}`` over several streams."""
    values: list[int] = []
    count = 0
    for s in streams:
        v, c = s.samples()
        values.extend(v)
        count += c
    if not percentiles or count == 0 or not values:
        return {"count": count, "percentiles": None}
    values.sort()
    out = []
    for q in percentiles:
        idx = min(len(values) - 1, max(0, int(round(q * len(values))) - 1))
        out.append({"quantile": q, "value": values[idx]})
    return {"count": count, "percentiles": out}
