#!/usr/bin/env python3
"""How fast is one scheduling round at lab scale? Prints figures and ratios, asserts nothing.

1,000 simulated boards of 8 device types on 20 exporter hosts. The mixed cases queue 5,000-40,000
runs from 50 teams at 5 priorities, each fitting some board; the worst case queues 10,000 runs
from 20 teams of which 97% fit no free board (a busy board revision, a pinned busy board), so no
round ends early for lack of free boards. Each round is timed against `baseline_schedule`, the
scheduler before its index (issue 12), on the same inputs. The operator keeps its queue sorted
between rounds (`WaitingQueue`) and asks only for the queue's head; the round is timed that way,
and what keeping the queue costs is printed per run that arrives. Last, a round with every team
paused but one namespace, against the walk that passed the paused runs one by one. Run: make bench
"""

from __future__ import annotations

import gc
import random
import statistics
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import replace

from benchfarm.core.scheduling.assignment import Assignment, Decision, schedule
from benchfarm.core.scheduling.boardindex import BoardIndex, BoardView, matches
from benchfarm.core.scheduling.fairness import FairnessPolicy, RoundRobinFairness
from benchfarm.core.scheduling.queue import QueueEntry, Selector, WaitingQueue

TYPES = [f"soc-{i}" for i in range(8)]


def baseline_schedule(runs: Sequence[QueueEntry], boards: Sequence[BoardView], *,
                      running_per_namespace: Mapping[str, int] | None = None,
                      max_boards: Mapping[str, int] | None = None,
                      fairness: FairnessPolicy | None = None, now: float = 0.0) -> Decision:
    """schedule() as it was before issue 12, kept only as this benchmark's baseline: every run
    tries every free board of its type(s), O(runs x free boards) when runs fit none."""
    fairness = fairness or RoundRobinFairness()
    order = fairness.order(runs)
    running = dict(running_per_namespace or {})
    limits = max_boards or {}
    free_by_type: dict[str, list[BoardView]] = defaultdict(list)
    for b in sorted(boards, key=lambda b: b.name):
        if b.available:
            free_by_type[b.device_type].append(b)
    taken: set[str] = set()
    assignments: list[Assignment] = []
    remaining: list[QueueEntry] = []
    free_count = sum(len(v) for v in free_by_type.values())
    for run in order:
        if free_count == len(taken):
            remaining.append(run)
            continue
        if running.get(run.namespace, 0) >= limits.get(run.namespace, 1 << 30):
            remaining.append(run)
            continue
        types = [run.selector.device_type] if run.selector.device_type else list(free_by_type)
        chosen = None
        for t in types:
            for b in free_by_type.get(t, ()):
                if b.name in taken or b.name in run.avoid or (run.needs_gpu and not b.gpu):
                    continue
                if matches(run.selector, b):
                    chosen = b
                    break
            if chosen:
                break
        if chosen is None:
            remaining.append(run)
            continue
        taken.add(chosen.name)
        running[run.namespace] = running.get(run.namespace, 0) + 1
        fairness.served(run, now)
        assignments.append(Assignment(run.key, chosen.name))
    return Decision(assignments, remaining)


def lab(n_boards: int, rnd: random.Random, busy: float) -> list[BoardView]:
    return [BoardView(f"b{i:04d}", rnd.choice(TYPES), {"host": f"exp{i % 20}",
                                                      "ddr": rnd.choice(["lpddr4", "ddr4"])},
                      available=rnd.random() > busy) for i in range(n_boards)]


def with_busy_revision(boards: list[BoardView]) -> list[BoardView]:
    """Every tenth board becomes revision b, and all of those are busy."""
    return [replace(b, labels={**b.labels, "rev": "b"}, available=False) if i % 10 == 0 else b
            for i, b in enumerate(boards)]


def queue(n_runs: int, rnd: random.Random) -> list[QueueEntry]:
    runs = []
    for i in range(n_runs):
        ns = f"team-{rnd.randrange(50)}"
        labels = {"ddr": "lpddr4"} if rnd.random() < 0.3 else {}
        runs.append(QueueEntry(f"{ns}/r{i}", ns, rnd.choice([10, 50, 100, 100, 500]), float(i),
                              Selector.of(rnd.choice(TYPES), labels)))
    return runs


def unfit_queue(n_runs: int, rnd: random.Random, boards: list[BoardView]) -> list[QueueEntry]:
    """60% want revision b of any type, 20% of one type, 17% a busy board by name, 3% fit."""
    busy = [b.name for b in boards if not b.available]
    runs = []
    for i in range(n_runs):
        ns = f"team-{rnd.randrange(20)}"
        x = rnd.random()
        if x < 0.6:
            sel = Selector.of(labels={"rev": "b"})
        elif x < 0.8:
            sel = Selector.of(rnd.choice(TYPES), {"rev": "b"})
        elif x < 0.97:
            sel = Selector.of(board=rnd.choice(busy))
        else:
            sel = Selector.of(rnd.choice(TYPES))
        runs.append(QueueEntry(f"{ns}/r{i}", ns, rnd.choice([10, 50, 100, 100, 500]), float(i), sel))
    return runs


def timed(fn, runs, boards, **kwargs) -> tuple[float, Decision]:
    gc.collect()   # or the first round after building the inputs pays for their collection
    t0 = time.perf_counter()
    d = fn(runs, boards, fairness=RoundRobinFairness(), now=1.0, **kwargs)
    return (time.perf_counter() - t0) * 1e3, d


def bench(case: str, n_boards: int, n_runs: int, busy: float, repeat: int) -> dict:
    new, old, put_us, assigned, same = [], [], [], 0, True
    seat_kept, seat_built = [], []
    for k in range(repeat):
        rnd = random.Random(k)
        boards = lab(n_boards, rnd, busy)
        if case == "mixed":
            runs = queue(n_runs, rnd)
        else:
            boards = with_busy_revision(boards)
            runs = unfit_queue(n_runs, rnd, boards)
        t0 = time.perf_counter()
        kept = WaitingQueue()
        for run in rnd.sample(runs, len(runs)):       # they arrive in any order
            kept.put(run)
        put_us.append((time.perf_counter() - t0) / n_runs * 1e6)
        t_new, d_new = timed(schedule, kept, boards, head=2)
        t_old, d_old = timed(baseline_schedule, runs, boards)
        new.append(t_new)
        old.append(t_old)
        # the operator's usual round: one seat free, the boards' index kept from the last round
        index = BoardIndex(boards)
        seat_kept.append(timed(schedule, kept, index, head=2, max_assignments=1)[0])
        seat_built.append(timed(schedule, kept, boards, head=2, max_assignments=1)[0])
        assigned = len(d_new.assignments)
        same &= (d_new.assignments == d_old.assignments
                 and [r.key for r in d_new.order] == [r.key for r in d_old.order][:2])
    return {"p50": statistics.median(new), "max": max(new), "base": statistics.median(old),
            "put": statistics.median(put_us), "assigned": assigned, "same": same,
            "seat_kept": statistics.median(seat_kept), "seat_built": statistics.median(seat_built)}


class EveryRun(RoundRobinFairness):
    """The walk before namespaces at their ceiling were passed over whole: it yields every run,
    and the round skips a paused one at a time."""

    def walk(self, queue: WaitingQueue, passing=()):  # noqa: ANN001, ANN201
        return super().walk(queue)


def paused(repeat: int = 5) -> None:
    """The full bench's probes (`make bench-scale`): 20 teams paused by a LabPolicy (maxBoards
    0) with 10,000 runs queued at priorities 100-500, one run of another namespace at priority
    10 to start on one of 1,000 boards."""
    rnd = random.Random(5)
    boards = lab(1000, rnd, 0.5)
    kept = WaitingQueue(replace(r, namespace=f"team-{i % 20}", key=f"team-{i % 20}/r{i}",
                                priority=max(100, r.priority))
                        for i, r in enumerate(queue(10000, rnd)))
    kept.put(QueueEntry("probe/p0", "probe", 10, 9e9, Selector.of(boards[0].device_type)))
    limits = {f"team-{i}": 0 for i in range(20)}
    index = BoardIndex(boards)
    times: dict[str, list[float]] = {"passed": [], "every": []}
    for _ in range(repeat):
        for name, fairness in (("passed", RoundRobinFairness()), ("every", EveryRun())):
            gc.collect()
            t0 = time.perf_counter()
            d = schedule(kept, index, max_boards=limits, fairness=fairness, now=1.0, head=2,
                         max_assignments=1)
            times[name].append((time.perf_counter() - t0) * 1e3)
            assert [a.run for a in d.assignments] == ["probe/p0"]
    fast, slow = statistics.median(times["passed"]), statistics.median(times["every"])
    print(f"20 teams paused, 10,000 runs queued, one run of another namespace starts: "
          f"{fast:.2f} ms a round, {slow:.2f} ms walking every paused run ({slow / fast:.0f}x)")


def main() -> None:
    print(f"{'case':>6} {'boards':>6} {'queued':>6} {'busy':>4} {'p50 ms':>7} {'max ms':>7} "
          f"{'baseline p50 ms':>15} {'ratio':>7} {'assigned':>8} {'us/run':>6} {'put us':>6} same "
          f"{'1 seat: index kept / built ms':>29}")
    for case, n_boards, n_runs, busy, repeat in [
            ("mixed", 100, 1000, 0.5, 5), ("mixed", 1000, 5000, 0.5, 5),
            ("mixed", 1000, 10000, 0.5, 5), ("mixed", 1000, 20000, 0.5, 5),
            ("mixed", 1000, 40000, 0.5, 5), ("mixed", 1000, 10000, 0.95, 5),
            ("unfit", 1000, 10000, 0.5, 3), ("unfit", 1000, 10000, 0.1, 3)]:
        r = bench(case, n_boards, n_runs, busy, repeat)
        print(f"{case:>6} {n_boards:6d} {n_runs:6d} {busy:4.2f} {r['p50']:7.1f} {r['max']:7.1f} "
              f"{r['base']:15.1f} {r['base'] / r['p50']:6.1f}x {r['assigned']:8d} "
              f"{r['p50'] / n_runs * 1e3:6.2f} {r['put']:6.1f} {'yes' if r['same'] else 'NO '} "
              f"{r['seat_kept']:13.3f} / {r['seat_built']:.3f} ({r['seat_built'] / r['seat_kept']:.0f}x)",
              flush=True)
    print("goal (issue 12): worst-case round < 50 ms. 1 seat: a round that may start one run, over "
          "the free boards' index kept between rounds (as the operator's) or built from the boards")
    paused()


if __name__ == "__main__":
    main()
