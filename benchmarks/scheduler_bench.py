#!/usr/bin/env python3
"""How fast is one scheduling round at lab scale? Prints figures and ratios, asserts nothing.

1,000 simulated boards of 8 device types on 20 exporter hosts, 5,000-40,000 queued runs from 50
teams at 5 priorities; a round assigns every free board. Run: make bench
"""

from __future__ import annotations

import random
import statistics
import time

from benchfarm.core.queue import BoardView, QueuedRun, RoundRobinFairness, Selector, schedule


def lab(n_boards: int, rnd: random.Random, busy: float) -> list[BoardView]:
    types = [f"soc-{i}" for i in range(8)]
    return [BoardView(f"b{i:04d}", rnd.choice(types), {"host": f"exp{i % 20}",
                                                       "ddr": rnd.choice(["lpddr4", "ddr4"])},
                      available=rnd.random() > busy) for i in range(n_boards)]


def queue(n_runs: int, rnd: random.Random) -> list[QueuedRun]:
    types = [f"soc-{i}" for i in range(8)]
    runs = []
    for i in range(n_runs):
        ns = f"team-{rnd.randrange(50)}"
        labels = {"ddr": "lpddr4"} if rnd.random() < 0.3 else {}
        runs.append(QueuedRun(f"{ns}/r{i}", ns, rnd.choice([10, 50, 100, 100, 500]), float(i),
                              Selector.of(rnd.choice(types), labels)))
    return runs


def bench(n_boards: int, n_runs: int, busy: float, repeat: int = 5) -> tuple[float, int]:
    times, assigned = [], 0
    for k in range(repeat):
        rnd = random.Random(k)
        boards, runs = lab(n_boards, rnd, busy), queue(n_runs, rnd)
        t0 = time.perf_counter()
        d = schedule(runs, boards, fairness=RoundRobinFairness(), now=1.0)
        times.append(time.perf_counter() - t0)
        assigned = len(d.assignments)
    return statistics.median(times), assigned


def main() -> None:
    print(f"{'boards':>7} {'queued':>7} {'busy':>5} {'round (ms)':>11} {'assigned':>9} {'us/run':>7}")
    base = None
    for n_boards, n_runs, busy in [(100, 1000, 0.5), (1000, 5000, 0.5), (1000, 10000, 0.5),
                                   (1000, 20000, 0.5), (1000, 40000, 0.5), (1000, 10000, 0.95)]:
        t, assigned = bench(n_boards, n_runs, busy)
        per_run = t / n_runs * 1e6
        base = base or per_run
        print(f"{n_boards:7d} {n_runs:7d} {busy:5.2f} {t * 1e3:11.1f} {assigned:9d} {per_run:7.1f}"
              f"  (x{per_run / base:.2f} per run vs the smallest case)")


if __name__ == "__main__":
    main()
