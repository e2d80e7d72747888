"""The overview's chart: retrieval latency and outcomes per hour or day.

Numbers only; the template draws the SVG on the server (no script, no CDN).
"""

from __future__ import annotations

import statistics
from datetime import UTC, datetime, timedelta

from kirolearn import contract
from kirolearn.search import OUTCOMES


def latency_series(rows: list[tuple], days: int, now: datetime | None = None) -> dict:
    """Retrievals per time bucket (an hour when ``days`` ≤ 2, else a day), every bucket
    of the last ``days`` included so that a quiet spell shows: latency p50 and p95 (None
    for an empty bucket), and how many of each outcome."""
    hourly = days <= 2
    step = timedelta(hours=1) if hourly else timedelta(days=1)
    label = "%Y-%m-%d %H:00" if hourly else "%Y-%m-%d"

    def empty(key: str) -> dict:
        return {"bucket": key, "latencies": [], **{o: 0 for o in OUTCOMES}}

    now = now or datetime.now(UTC)
    buckets = {}
    when = now - timedelta(days=days)
    while when <= now:
        buckets[when.strftime(label)] = empty(when.strftime(label))
        when += step
    for created_at, latency_ms, outcome in rows:
        key = contract.parse_valid_time(created_at).astimezone(UTC).strftime(label)
        bucket = buckets.setdefault(key, empty(key))
        bucket["latencies"].append(latency_ms)
        bucket[outcome] = bucket.get(outcome, 0) + 1
    series = []
    for key in sorted(buckets):
        bucket = buckets[key]
        latencies = sorted(bucket.pop("latencies"))
        bucket.update(count=len(latencies), p50_ms=None, p95_ms=None)
        if latencies:
            bucket.update(p50_ms=round(statistics.median(latencies), 1),
                          p95_ms=round(latencies[min(len(latencies) - 1,
                                                     int(0.95 * len(latencies)))], 1))
        series.append(bucket)
    return {"unit": "hour" if hourly else "day", "days": days, "buckets": series}


def chart(series: dict, width: int = 720, height: int = 220) -> dict:
    """Geometry for the overview's SVG chart: outcome bars per bucket (left axis, count)
    and p50/p95 latency lines (right axis, ms). Numbers only; the template draws it."""
    buckets = series["buckets"]
    if not any(b["count"] for b in buckets):
        return {"empty": True, "width": width, "height": height}
    pad, plot_w, plot_h = 40, width - 100, height - 50
    step = plot_w / len(buckets)
    top_count = max(b["count"] for b in buckets) or 1
    top_ms = max(b["p95_ms"] or 0 for b in buckets) or 1.0
    bars, p50, p95, labels, points = [], [], [], [], []
    for n, bucket in enumerate(buckets):
        x = pad + n * step
        y = 10 + plot_h
        for outcome in OUTCOMES:
            h = plot_h * bucket[outcome] / top_count
            if h:
                y -= h
                bars.append({"x": round(x + step * 0.15, 1), "y": round(y, 1),
                             "w": round(step * 0.7, 1), "h": round(h, 1), "outcome": outcome,
                             "title": f"{bucket['bucket']}: {bucket[outcome]} {outcome}"})
        mid = x + step / 2
        for name, line in (("p50", p50), ("p95", p95)):
            if bucket[f"{name}_ms"] is None:
                continue  # no retrieval then: the line goes straight to the next one
            y = 10 + plot_h - plot_h * bucket[f"{name}_ms"] / top_ms
            line.append(f"{mid:.1f},{y:.1f}")
            points.append({"x": round(mid, 1), "y": round(y, 1), "line": name,
                           "title": f"{bucket['bucket']}: {name} {bucket[f'{name}_ms']} ms"})
        if n % max(1, len(buckets) // 6) == 0:
            labels.append({"x": round(mid, 1), "text": bucket["bucket"][5:]})
    return {"empty": False, "width": width, "height": height, "bars": bars,
            "p50": " ".join(p50), "p95": " ".join(p95), "points": points, "labels": labels,
            "top_count": top_count, "top_ms": top_ms, "base_y": 10 + plot_h,
            "right": pad + plot_w}
