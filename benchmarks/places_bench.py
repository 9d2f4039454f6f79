#!/usr/bin/env python3
"""Reading the lab's places: every place's resources matched the old way (each place against every
resource) and through the exporter/group index of `lab.coordinator._candidates`.

Real labgrid `Place`, `ResourceMatch` and `ResourceEntry` objects, as a ClientSession holds them,
for a lab of N places (2 resources each, 50 exporters). Prints figures and the ratio; asserts
nothing. Usage: places_bench.py [N ...]   (default: 100 1000)
"""

from __future__ import annotations

import statistics
import sys
import time

from labgrid.remote.common import Place, ResourceEntry, ResourceMatch

from benchfarm.lab.coordinator import _candidates


def lab(n: int):
    resources: dict = {}
    places = {}
    for i in range(n):
        exporter, group = f"rack{i % 50}", f"board{i}"
        resources.setdefault(exporter, {})[group] = {
            "NetworkSerialPort": ResourceEntry({"cls": "NetworkSerialPort",
                                                "params": {"host": "h", "port": 1000 + i}}),
            "NetworkPowerPort": ResourceEntry({"cls": "NetworkPowerPort",
                                               "params": {"model": "simplerest", "index": i}})}
        places[group] = Place(group, matches=[ResourceMatch(exporter, group, "*")])
    return places, resources


def old(places, resources):
    out = {}
    for name, place in places.items():
        found = {}
        for exporter, groups in resources.items():
            for group_name, group in groups.items():
                for res_name, res in group.items():
                    if place.getmatch((exporter, group_name, res.cls, res_name)):
                        found[res.cls] = res.args
        out[name] = found
    return out


def indexed(places, resources):
    out = {}
    for name, place in places.items():
        found = {}
        for exporter, group_name, res_name, res in _candidates(place, resources):
            if place.getmatch((exporter, group_name, res.cls, res_name)):
                found[res.cls] = res.args
        out[name] = found
    return out


def timed(fn, *args, runs: int = 5) -> tuple[float, object]:
    times, result = [], None
    for _ in range(runs):
        t = time.perf_counter()
        result = fn(*args)
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times), result


def main() -> None:
    for n in [int(a) for a in sys.argv[1:]] or [100, 1000]:
        places, resources = lab(n)
        t_old, r_old = timed(old, places, resources, runs=3 if n >= 1000 else 5)
        t_new, r_new = timed(indexed, places, resources)
        assert r_old == r_new
        print(f"{n:5d} places: full match {t_old:9.1f} ms   indexed {t_new:7.2f} ms   "
              f"ratio {t_old / t_new:7.0f}x", flush=True)


if __name__ == "__main__":
    main()
