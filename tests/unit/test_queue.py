"""The pure scheduler: priority, fairness across namespaces, selectors, limits, exclusivity."""

from __future__ import annotations

import random
from dataclasses import replace

from benchfarm.core.scheduling.assignment import Assignment, Decision, queue_positions, schedule
from benchfarm.core.scheduling.boardindex import BoardView, could_ever_match, matches
from benchfarm.core.scheduling.fairness import RoundRobinFairness, StrictOrder
from benchfarm.core.scheduling.queue import QueueEntry, Selector, WaitingQueue

X86 = Selector.of("qemu-x86")


def run(key, ns="a", prio=100, created=0.0, sel=X86, avoid=()):
    return QueueEntry(f"{ns}/{key}", ns, prio, created, sel, frozenset(avoid))


def boards(n=1, dtype="qemu-x86", **labels):
    return [BoardView(f"b{i}", dtype, labels) for i in range(n)]


def test_higher_priority_first_then_age():
    runs = [run("old", created=1), run("new-high", prio=500, created=5), run("older", created=0)]
    d = schedule(runs, boards(1))
    assert [a.run for a in d.assignments] == ["a/new-high"]
    assert [r.key for r in d.order] == ["a/older", "a/old"]


def test_never_two_runs_on_one_board():
    d = schedule([run(f"r{i}", created=i) for i in range(10)], boards(3))
    assert len(d.assignments) == 3
    assert len({a.board for a in d.assignments}) == 3


def test_namespaces_alternate_at_equal_priority():
    fair = RoundRobinFairness()
    runs = [run("a1", "a", created=0), run("a2", "a", created=1), run("a3", "a", created=2),
            run("b1", "b", created=3), run("b2", "b", created=4)]
    started = []
    now = 0.0
    while runs:
        now += 1
        d = schedule(runs, boards(1), fairness=fair, now=now)
        (a,) = d.assignments
        started.append(a.run)
        runs = [r for r in runs if r.key != a.run]
    assert started == ["a/a1", "b/b1", "a/a2", "b/b2", "a/a3"]


def test_selector_labels_board_and_avoid():
    bs = [BoardView("x0", "qemu-x86", {"rack": "1"}), BoardView("x1", "qemu-x86", {"rack": "2"})]
    d = schedule([run("r", sel=Selector.of("qemu-x86", {"rack": "2"}))], bs)
    assert d.assignments[0].board == "x1"
    d = schedule([run("r", sel=Selector.of(board="x0"))], bs)
    assert d.assignments[0].board == "x0"
    d = schedule([run("r", avoid=["x0"])], bs)
    assert d.assignments[0].board == "x1"


def test_unavailable_boards_make_runs_wait_and_impossible_selectors_are_detected():
    bs = [BoardView("x0", "qemu-x86", available=False)]
    d = schedule([run("r")], bs)
    assert d.assignments == [] and [r.key for r in d.order] == ["a/r"]
    assert could_ever_match(X86, bs)
    assert not could_ever_match(Selector.of("am62x"), bs)


def test_namespace_board_limit():
    d = schedule([run("a1", "a"), run("a2", "a", created=1), run("b1", "b", created=2)], boards(3),
                 max_boards={"a": 1}, running_per_namespace={})
    assert sorted(a.run for a in d.assignments) == ["a/a1", "b/b1"]


def test_gpu_runs_only_on_gpu_boards():
    bs = [BoardView("x0", "qemu-x86"), BoardView("g0", "qemu-x86", gpu=True)]
    d = schedule([QueueEntry("a/g", "a", 1, 0, Selector.of("qemu-x86"), needs_gpu=True)], bs)
    assert d.assignments[0].board == "g0"


def test_strict_order_ignores_namespaces_and_positions_are_capped():
    runs = [run(f"r{i}", "a" if i % 2 else "b", created=i) for i in range(80)]
    d = schedule(runs, [], fairness=StrictOrder())
    pos = queue_positions(d.order, 50)
    assert len(pos) == 50 and pos["b/r0"] == 1 and pos["a/r1"] == 2


def test_many_unfit_runs_before_a_fitting_one():
    bs = [BoardView("x0", "qemu-x86", {"rack": "1"}), BoardView("a0", "am62x", available=False)]
    unfit = ([run(f"t{i}", prio=500, created=i, sel=Selector.of("am62x")) for i in range(300)]
             + [run(f"l{i}", prio=500, created=i, sel=Selector.of(labels={"rack": "2"}))
                for i in range(300)]
             + [run(f"p{i}", prio=500, created=i, sel=Selector.of(board="a0")) for i in range(300)])
    d = schedule(unfit + [run("fits", prio=10, created=999)], bs, fairness=StrictOrder())
    assert [(a.run, a.board) for a in d.assignments] == [("a/fits", "x0")]
    assert [r.key for r in d.order] == [r.key for r in StrictOrder().order(unfit)]


def test_a_run_avoiding_every_fitting_board_does_not_stop_the_next():
    bs = boards(3)
    runs = [run("avoids-all", created=0, avoid=["b0", "b1", "b2"]),
            run("avoids-b0", created=1, avoid=["b0"]), run("any", created=2),
            run("avoids-b2", created=3, avoid=["b2"]), run("late", created=4)]
    d = schedule(runs, bs, fairness=StrictOrder())
    assert [(a.run, a.board) for a in d.assignments] == [
        ("a/avoids-b0", "b1"), ("a/any", "b0"), ("a/late", "b2")]
    assert [r.key for r in d.order] == ["a/avoids-all", "a/avoids-b2"]


def test_a_namespace_at_its_limit_lets_the_next_namespace_take_the_board():
    runs = [run("a1", "a", created=0), run("a2", "a", created=1), run("b1", "b", created=2),
            run("c1", "c", created=3, sel=Selector.of("am62x")), run("b2", "b", created=4)]
    d = schedule(runs, boards(4), max_boards={"a": 2, "b": 1}, running_per_namespace={"a": 1},
                 fairness=StrictOrder())
    assert [(a.run, a.board) for a in d.assignments] == [("a/a1", "b0"), ("b/b1", "b1")]
    assert [r.key for r in d.order] == ["a/a2", "c/c1", "b/b2"]


class CountingWalk(RoundRobinFairness):
    def __init__(self) -> None:
        super().__init__()
        self.walked = 0

    def walk(self, queue, passing=()):
        return self._counted(super().walk(queue, passing))   # its order fixed now, as the base's

    def _counted(self, walk):
        for entry in walk:
            self.walked += 1
            yield entry


def test_a_round_stops_walking_when_every_namespace_is_at_its_ceiling():
    """A LabPolicy that pauses every team (maxBoards 0) with thousands queued: the round reads
    the queue's head and stops; a team that reaches its ceiling during the round closes it too."""
    runs = WaitingQueue(run(f"r{i}", f"team-{i % 20}", created=float(i)) for i in range(5000))
    paused = CountingWalk()
    d = schedule(runs, boards(10), max_boards={f"team-{i}": 0 for i in range(20)},
                 fairness=paused, head=2)
    assert d.assignments == [] and len(d.order) == 2 and paused.walked <= 3
    one_left = CountingWalk()   # 19 teams paused, the 20th may start 2 runs
    d = schedule(runs, boards(10), max_boards={f"team-{i}": 0 for i in range(19)} |
                 {"team-19": 2}, fairness=one_left, head=2)
    assert [a.run for a in d.assignments] == ["team-19/r19", "team-19/r39"]
    assert one_left.walked <= 3 + 2 + 2      # team-19's two and the next, then the head


def test_a_round_passes_over_the_namespaces_at_their_ceiling_whole():
    """The full bench's probes: 20 teams paused with 4,000 runs of higher priority queued, one
    run of a 21st namespace to start. The round reads that run and the queue's head, not the
    paused runs one by one; the head is where the paused runs stand, as without passing."""
    runs = WaitingQueue([run(f"r{i}", f"team-{i % 20}", prio=100 + 100 * (i % 2), created=float(i))
                         for i in range(4000)] + [run("probe", "probe", prio=0, created=9e9)])
    paused = {f"team-{i}": 0 for i in range(20)}
    walk = CountingWalk()
    d = schedule(runs, boards(3), max_boards=paused, fairness=walk, head=3)
    assert [a.run for a in d.assignments] == ["probe/probe"]
    assert [r.key for r in d.order] == ["team-1/r1", "team-3/r3", "team-5/r5"]
    assert walk.walked <= 1 + 3
    everyone = RoundRobinFairness()      # the reference: the order of every waiting run
    assert [r.key for r in d.order] == [r.key for r in everyone.order(runs._runs.values())
                                        if r.key != "probe/probe"][:3]


def test_labels_match_as_a_subset_of_the_board_labels():
    bs = [BoardView("b0", "qemu-x86", {"rack": "2"}),
          BoardView("b1", "qemu-x86", {"rack": "1", "ddr": "ddr4"}),
          BoardView("b2", "qemu-x86", {"rack": "2", "ddr": "ddr4", "host": "exp1"})]
    both = Selector.of("qemu-x86", {"rack": "2", "ddr": "ddr4"})
    d = schedule([run("both", created=0, sel=both), run("both-again", created=1, sel=both),
                  run("rack", created=2, sel=Selector.of(labels={"rack": "2"})),
                  run("ddr", created=3, sel=Selector.of(labels={"ddr": "ddr4"}))], bs,
                 fairness=StrictOrder())
    assert [(a.run, a.board) for a in d.assignments] == [
        ("a/both", "b2"), ("a/rack", "b0"), ("a/ddr", "b1")]
    assert [r.key for r in d.order] == ["a/both-again"]


def test_a_run_naming_no_device_type_tries_the_types_in_turn():
    bs = [BoardView("b2", "qemu-x86"), BoardView("b0", "am62x"), BoardView("b1", "qemu-x86")]
    d = schedule([run(f"r{i}", created=i, sel=Selector.of()) for i in range(3)], bs,
                 fairness=StrictOrder())
    assert [a.board for a in d.assignments] == ["b0", "b1", "b2"]
    bs = [BoardView("b0", "qemu-x86"), BoardView("b1", "am62x"), BoardView("b2", "qemu-x86")]
    d = schedule([run(f"r{i}", created=i, sel=Selector.of()) for i in range(3)], bs,
                 fairness=StrictOrder())
    assert [a.board for a in d.assignments] == ["b0", "b2", "b1"]


def reference_schedule(runs, boards, running_per_namespace, max_boards, fairness, now):
    """Each run in turn tries every free board: O(runs x boards), the obvious way."""
    free = sorted((b for b in boards if b.available), key=lambda b: b.name)
    type_rank = {}
    for b in free:
        type_rank.setdefault(b.device_type, len(type_rank))
    free.sort(key=lambda b: type_rank[b.device_type])    # stable: by name within a type
    running, taken, assignments, remaining = dict(running_per_namespace), set(), [], []
    for r in fairness.order(runs):
        chosen = None
        if running.get(r.namespace, 0) < max_boards.get(r.namespace, 1 << 30):
            chosen = next((b for b in free if b.name not in taken and b.name not in r.avoid
                           and (b.gpu or not r.needs_gpu) and matches(r.selector, b)), None)
        if chosen is None:
            remaining.append(r)
            continue
        taken.add(chosen.name)
        running[r.namespace] = running.get(r.namespace, 0) + 1
        fairness.served(r, now)
        assignments.append(Assignment(r.key, chosen.name))
    return Decision(assignments, remaining)


def random_round(rnd):
    types, racks = ["qemu-x86", "am62x", "rpi4"], ["1", "2", "3"]
    names = [f"b{i}" for i in range(16)]
    bs = []
    for name in rnd.sample(names, rnd.randint(0, 16)):
        labels = {k: rnd.choice(v) for k, v in (("rack", racks), ("ddr", ["ddr4", "lpddr4"]))
                  if rnd.random() < 0.7}
        bs.append(BoardView(name, rnd.choice(types), labels, available=rnd.random() < 0.6,
                            gpu=rnd.random() < 0.3))
    namespaces = ["a", "b", "c", "d"]
    runs = []
    for i in range(rnd.randint(0, 40)):
        ns = rnd.choice(namespaces)
        labels = {k: rnd.choice(v) for k, v in (("rack", racks + ["9"]), ("ddr", ["ddr4"]))
                  if rnd.random() < 0.3}
        sel = Selector.of(rnd.choice([None, "nope", *types]), labels,
                          rnd.choice(names) if rnd.random() < 0.15 else None)
        avoid = frozenset(rnd.sample(names, rnd.randint(0, 4)) if rnd.random() < 0.3 else ())
        runs.append(QueueEntry(f"{ns}/r{i}", ns, rnd.choice([10, 100, 100]),
                              float(rnd.randint(0, 9)), sel, avoid, needs_gpu=rnd.random() < 0.2))
    running = {ns: rnd.randint(0, 2) for ns in namespaces if rnd.random() < 0.5}
    limits = {ns: rnd.randint(0, 4) for ns in namespaces if rnd.random() < 0.5}
    served = {ns: float(rnd.randint(0, 5)) for ns in namespaces if rnd.random() < 0.5}
    return runs, bs, running, limits, served


def test_schedule_agrees_with_the_reference_on_random_rounds():
    for seed in range(400):
        rnd = random.Random(seed)
        runs, bs, running, limits, served = random_round(rnd)
        for make_fairness in (RoundRobinFairness, StrictOrder):
            fast, slow = make_fairness(), make_fairness()
            if isinstance(fast, RoundRobinFairness):
                fast.last_served.update(served)
                slow.last_served.update(served)
            got = schedule(runs, bs, running_per_namespace=running, max_boards=limits,
                           fairness=fast, now=7.0)
            want = reference_schedule(runs, bs, running, limits, slow, 7.0)
            assert got.assignments == want.assignments, seed
            assert [r.key for r in got.order] == [r.key for r in want.order], seed
            assert vars(fast) == vars(slow), seed


def test_boards_go_only_to_runs_whose_session_can_start_now():
    runs = [run(f"r{i}", created=i) for i in range(10)]
    d = schedule(runs, boards(5), max_assignments=2)
    assert [a.run for a in d.assignments] == ["a/r0", "a/r1"]
    assert [r.key for r in d.order][:3] == ["a/r2", "a/r3", "a/r4"]
    assert schedule(runs, boards(5), max_assignments=0).assignments == []
    assert len(schedule(runs, boards(5), max_assignments=None).assignments) == 5


def test_a_queue_kept_between_rounds_decides_as_one_built_afresh():
    """The operator keeps its WaitingQueue across rounds (runs arrive, change priority or avoided
    boards, leave) and asks only for the head of what still waits: same boards to the same runs,
    and the head is the full order's head."""
    for seed in range(300):
        rnd = random.Random(seed)
        runs, bs, running, limits, served = random_round(rnd)
        kept = WaitingQueue()
        for r in runs:                                  # arrivals, with changes and departures
            kept.put(replace(r, priority=r.priority + 1))
            if rnd.random() < 0.2:
                kept.discard(r.key)
            kept.put(r)
        gone = {r.key for r in runs if rnd.random() < 0.2}
        for key in gone:
            kept.discard(key)
        left = [r for r in runs if r.key not in gone]
        assert len(kept) == len(left) and set(kept.keys()) == {r.key for r in left}
        for make_fairness in (RoundRobinFairness, StrictOrder):
            a, b = make_fairness(), make_fairness()
            if isinstance(a, RoundRobinFairness):
                a.last_served.update(served)
                b.last_served.update(served)
            slots = rnd.choice([None, 0, 1, 3])
            full = schedule(left, bs, running_per_namespace=running, max_boards=limits,
                            fairness=a, now=3.0, max_assignments=slots)
            head = schedule(kept, bs, running_per_namespace=running, max_boards=limits,
                            fairness=b, now=3.0, max_assignments=slots, head=2)
            assert head.assignments == full.assignments, seed
            assert [r.key for r in head.order] == [r.key for r in full.order][:2], seed
            assert vars(a) == vars(b), seed
        assert len(kept) == len(left)                   # a round never changes the queue


def test_a_round_stops_where_nothing_more_can_start():
    """Ten thousand waiting runs, one free board: the round reads the queue's head, not all of it."""
    read = []

    class Counting(StrictOrder):
        def walk(self, queue, passing=()):
            for r in super().walk(queue, passing):
                read.append(r.key)
                yield r

    q = WaitingQueue(run(f"r{i:05d}", created=i) for i in range(10_000))
    d = schedule(q, boards(1), fairness=Counting(), head=2)
    assert [a.run for a in d.assignments] == ["a/r00000"]
    assert [r.key for r in d.order] == ["a/r00001", "a/r00002"] and len(read) == 3
    read.clear()                       # runs that fit no free board: one look at each kind
    q.put(run("late-fit", created=20_000, sel=Selector.of("am62x")))
    d = schedule(q, [BoardView("b0", "qemu-x86", available=False), BoardView("m0", "am62x")],
                 fairness=Counting(), head=2)
    assert [a.run for a in d.assignments] == ["a/late-fit"] and len(read) == 10_001
    read.clear()
    q.discard("a/late-fit")
    d = schedule(q, [BoardView("m0", "am62x")], fairness=Counting(), head=2)
    assert d.assignments == [] and len(read) == 2      # no waiting run fits: the head only


def test_the_oldest_waiting_entry_is_found_across_priorities_and_namespaces():
    """What benchfarm_queue_oldest_wait_seconds is measured from (BenchfarmQueueLate)."""
    q = WaitingQueue()
    assert q.oldest() is None
    q.put(run("new-urgent", "team-a", prio=900, created=50.0))
    q.put(run("old", "team-b", prio=100, created=10.0))
    q.put(run("older-still", "team-c", prio=100, created=5.0))
    q.put(run("middle", "team-b", prio=100, created=20.0))
    assert q.oldest() == 5.0
    q.discard("team-c/older-still")
    assert q.oldest() == 10.0
    q.put(replace(q.get("team-b/old"), priority=500))     # a priority changed: still the oldest
    assert q.oldest() == 10.0
    for key in list(q.keys()):
        q.discard(key)
    assert q.oldest() is None
