"""Which free boards a waiting run may get: a board as the scheduler sees it (`BoardView`), whether
it fits a run's selector (`matches`), and the available boards indexed between rounds.

Free boards are indexed by board, device type, label and GPU, kept between rounds (`BoardIndex`:
a board that changes moves in or out of it); a run asking for something reads the shortest index
list it names, never a pass over all the boards to index them.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from benchfarm.core.scheduling.queue import Selector


@dataclass(frozen=True)
class BoardView:
    name: str
    device_type: str
    labels: Mapping[str, str] = field(default_factory=dict)
    available: bool = True        # idle, not drained, not quarantined, free in labgrid
    gpu: bool = False


def matches(selector: Selector, board: BoardView) -> bool:
    if selector.board is not None and selector.board != board.name:
        return False
    if selector.device_type is not None and selector.device_type != board.device_type:
        return False
    return all(board.labels.get(k) == v for k, v in selector.labels)


def could_ever_match(selector: Selector, boards: Iterable[BoardView]) -> bool:
    """Whether any board of the inventory (busy or not) fits; if none, waiting is pointless."""
    return any(matches(selector, b) for b in boards)


def _name(b: BoardView) -> str:
    return b.name


class BoardIndex:
    """The available boards, indexed by what selectors name, kept from one round to the next.

    A run naming a device type tries that type's boards by name; a run naming none tries the
    types one after another (in the order of each type's first board by name), each by name.
    Every candidate list keeps that order.

    A board that changes moves in or out of a few lists kept sorted by name (`put`: a bisect
    each), where building the index anew for every round walked and sorted all 1,000 boards:
    2-3 ms of a round's own CPU, each ms of it stretched several times over on a busy host
    while other threads took the GIL in between.
    """

    def __init__(self, boards: Iterable[BoardView] = ()) -> None:
        self.views: dict[str, BoardView] = {}            # every available board by name
        self.by_type: dict[str, list[BoardView]] = {}    # each by name
        # a label or the GPU: that type's boards bearing it, by name
        self.by_label: dict[tuple[str, str], dict[str, list[BoardView]]] = defaultdict(dict)
        self.with_gpu: dict[str, list[BoardView]] = {}
        self._types: list[str] | None = None             # types by their first board's name
        self._ordered: list[BoardView] | None = None
        for b in sorted(boards, key=_name):     # by name: each list grows at its end
            if b.available and b.name not in self.views:
                self.views[b.name] = b
                for lists, kind in self._lists(b):
                    lists.setdefault(kind, []).append(b)

    def __len__(self) -> int:
        return len(self.views)

    def put(self, view: BoardView) -> None:
        """A board as it is now: indexed while available, out of the index while not."""
        old = self.views.get(view.name)
        if old == view:
            return
        if old is not None:
            self._drop(old)
        if view.available:
            self._add(view)

    def remove(self, name: str) -> None:
        old = self.views.get(name)
        if old is not None:
            self._drop(old)

    def _lists(self, b: BoardView) -> Iterator[tuple[dict[str, list[BoardView]], str]]:
        yield self.by_type, b.device_type
        for pair in b.labels.items():
            yield self.by_label[pair], b.device_type
        if b.gpu:
            yield self.with_gpu, b.device_type

    def _add(self, b: BoardView) -> None:
        self.views[b.name] = b
        for lists, kind in self._lists(b):
            bisect.insort(lists.setdefault(kind, []), b, key=_name)
        self._types = self._ordered = None

    def _drop(self, b: BoardView) -> None:
        del self.views[b.name]
        for lists, kind in self._lists(b):
            of_kind = lists[kind]
            del of_kind[bisect.bisect_left(of_kind, b.name, key=_name)]
            if not of_kind:
                del lists[kind]
        for pair in b.labels.items():
            if not self.by_label[pair]:
                del self.by_label[pair]
        self._types = self._ordered = None

    def types(self) -> list[str]:
        if self._types is None:
            self._types = sorted(self.by_type, key=lambda t: self.by_type[t][0].name)
        return self._types

    def ordered(self) -> list[BoardView]:
        """Every available board in the order a run naming nothing tries them."""
        if self._ordered is None:
            self._ordered = [b for t in self.types() for b in self.by_type[t]]
        return self._ordered

    def _across(self, lists: dict[str, list[BoardView]]) -> list[BoardView]:
        if len(lists) == 1:
            return next(iter(lists.values()))
        return [b for t in self.types() if t in lists for b in lists[t]]

    def candidates(self, selector: Selector, needs_gpu: bool) -> list[BoardView]:
        """The shortest list holding every free board that could fit (a superset), in order."""
        if selector.board is not None:
            named = self.views.get(selector.board)
            return [named] if named is not None else []
        options: list[dict[str, list[BoardView]]] = []
        if selector.device_type is not None:
            of_type = self.by_type.get(selector.device_type)
            if of_type is None:
                return []
            options.append({selector.device_type: of_type})
        for pair in selector.labels:
            with_label = self.by_label.get(pair)
            if not with_label:
                return []
            options.append(with_label)
        if needs_gpu:
            if not self.with_gpu:
                return []
            options.append(self.with_gpu)
        if not options:
            return self.ordered()
        shortest = min(options, key=lambda lists: sum(len(v) for v in lists.values()))
        return self._across(shortest)
