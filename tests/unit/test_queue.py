"""The pure scheduler: priority, fairness across namespaces, selectors, limits, exclusivity."""

from __future__ import annotations

from benchfarm.core.queue import (BoardView, QueuedRun, RoundRobinFairness, Selector, StrictOrder,
                                  could_ever_match, queue_positions, schedule)

X86 = Selector.of("qemu-x86")


def run(key, ns="a", prio=100, created=0.0, sel=X86, avoid=()):
    return QueuedRun(f"{ns}/{key}", ns, prio, created, sel, frozenset(avoid))


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
    d = schedule([QueuedRun("a/g", "a", 1, 0, Selector.of("qemu-x86"), needs_gpu=True)], bs)
    assert d.assignments[0].board == "g0"


def test_strict_order_ignores_namespaces_and_positions_are_capped():
    runs = [run(f"r{i}", "a" if i % 2 else "b", created=i) for i in range(80)]
    d = schedule(runs, [], fairness=StrictOrder())
    pos = queue_positions(d.order, 50)
    assert len(pos) == 50 and pos["b/r0"] == 1 and pos["a/r1"] == 2
