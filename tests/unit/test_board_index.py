"""The free boards kept indexed between rounds (`core.scheduling.boardindex.BoardIndex`) and the board records that
say which of them changed (`operator.state.records.Boards`): a round sees exactly what an index built anew
from every board would show, in the same order, while only the boards that changed are viewed
again."""

from __future__ import annotations

import random

from benchfarm.core.scheduling.assignment import schedule
from benchfarm.core.scheduling.boardindex import BoardIndex, BoardView, matches
from benchfarm.core.scheduling.queue import QueueEntry, Selector
from benchfarm.operator.state.records import BoardRecord, Boards

TYPES = ["soc-b", "soc-a", "soc-c"]


def reference(views: dict[str, BoardView], selector: Selector, needs_gpu: bool) -> list[str]:
    """The free boards that fit, in the order a run tries them: types by their first board's
    name, each type's boards by name."""
    free = sorted((v for v in views.values() if v.available), key=lambda v: v.name)
    first: dict[str, str] = {}
    for v in free:
        first.setdefault(v.device_type, v.name)
    free.sort(key=lambda v: (first[v.device_type], v.name))
    return [v.name for v in free if matches(selector, v) and (v.gpu or not needs_gpu)]


def random_view(rng: random.Random, i: int) -> BoardView:
    labels = {"rack": f"r{rng.randrange(4)}"}
    if rng.random() < 0.5:
        labels["pool"] = rng.choice(["x", "y"])
    return BoardView(f"b{i:03d}", rng.choice(TYPES), labels, available=rng.random() < 0.7,
                     gpu=rng.random() < 0.2)


def selectors(rng: random.Random) -> list[tuple[Selector, bool]]:
    out = [(Selector.of(), False), (Selector.of(), True)]
    for _ in range(12):
        out.append((Selector.of(rng.choice([None, *TYPES]),
                                {k: v for k, v in (("rack", f"r{rng.randrange(5)}"),
                                                   ("pool", rng.choice(["x", "y"])))
                                 if rng.random() < 0.5},
                                rng.choice([None, None, f"b{rng.randrange(60):03d}"])),
                    rng.random() < 0.2))
    return out


def test_an_index_kept_through_changes_shows_what_one_built_anew_shows() -> None:
    for seed in range(20):
        rng = random.Random(seed)
        views = {f"b{i:03d}": random_view(rng, i) for i in range(50)}
        kept = BoardIndex(views.values())
        for _ in range(150):
            i = rng.randrange(55)
            name = f"b{i:03d}"
            roll = rng.random()
            if roll < 0.5 and name in views:        # busy or idle again
                views[name] = BoardView(name, views[name].device_type, views[name].labels,
                                        available=not views[name].available,
                                        gpu=views[name].gpu)
            elif roll < 0.9:                         # new, or relabelled, retyped
                views[name] = random_view(rng, i)
            else:                                    # gone from the scheduler's sight
                views.pop(name, None)
                kept.remove(name)
                continue
            kept.put(views[name])
            assert len(kept) == sum(v.available for v in views.values())
            built = BoardIndex(views.values())
            for selector, gpu in selectors(rng):
                want = reference(views, selector, gpu)
                for index in (kept, built):
                    got = [v.name for v in index.candidates(selector, gpu)
                           if matches(selector, v) and (v.gpu or not gpu)]
                    assert got == want, (seed, selector, gpu)


def test_a_round_over_the_kept_index_decides_as_over_the_boards() -> None:
    rng = random.Random(7)
    views = {f"b{i:03d}": random_view(rng, i) for i in range(60)}
    kept = BoardIndex(views.values())
    runs = [QueueEntry(f"t{k % 4}/r{k}", f"t{k % 4}", rng.choice([0, 100]), float(k), sel,
                       frozenset({f"b{rng.randrange(60):03d}"}), needs_gpu=gpu)
            for k, (sel, gpu) in enumerate(selectors(rng) * 5)]
    for slots in (1, 3, None):
        a = schedule(runs, kept, max_assignments=slots, head=5)
        b = schedule(runs, list(views.values()), max_assignments=slots, head=5)
        assert a == b and a.assignments
    assert len(kept) == sum(v.available for v in views.values()), "a round changed the index"


def test_board_records_note_the_changes_a_round_sees_and_only_those() -> None:
    boards = Boards()
    boards["p0"] = BoardRecord("p0", device_type="sim")
    boards.setdefault("p1", BoardRecord("p1"))
    assert boards.changed == {"p0", "p1"}
    boards.changed.clear()
    boards.setdefault("p1", BoardRecord("p1"))          # there already: no change
    boards["p0"].device_type = "sim"                    # the same value
    boards["p0"].failures = 3                           # the scheduler does not see it
    boards["p0"].holder = "someone"
    assert boards.changed == set()
    for field, value in (("run", "ns/r"), ("online", True), ("maintenance", True),
                         ("held_by_other", "x"), ("quarantined_since", 1.0),
                         ("labels", {"rack": "r1"}), ("device_type", "other")):
        setattr(boards["p1"], field, value)
        assert boards.changed == {"p1"}, field
        boards.changed.clear()
    loose = BoardRecord("p9")                            # in no Boards: notes nothing
    loose.run = "ns/r"
    assert boards.changed == set()
