"""The operator's side of a run's lifecycle, typed: the decision it has on its way to the API
server (`InFlight`, with the moves `MOVES` allows, as labgrid's strategies have their states).
The run's phase is the API server's (`api.outcomes.Phase`); its session seat is a value with
moves of its own (`core.scheduling.seats.Seat`). Records hold both (`operator.state.records.RunState`); the owner thread
alone moves them (`operator.state.owner`).
"""

from __future__ import annotations

from enum import Enum


class InFlight(Enum):
    """The operator's own decision about a run that is on its way to the API server (a launch
    thread writes it), and what a round counts the run as meanwhile. One at a time: a decision
    is made only from `none` and goes back to `none` when its write landed or failed (`MOVES`);
    the run's watch events never change it."""

    none = "none"
    launch_seated = "launch-seated"     # its launch, with a session seat: a board and a seat
    launch_standby = "launch-standby"   # its launch on standby: a board, a seat to come
    go_ahead = "go-ahead"               # its standby session given a seat: the go-ahead's write


MOVES: dict[InFlight, frozenset[InFlight]] = {
    InFlight.none: frozenset({InFlight.launch_seated, InFlight.launch_standby, InFlight.go_ahead}),
    InFlight.launch_seated: frozenset({InFlight.none}),
    InFlight.launch_standby: frozenset({InFlight.none}),
    InFlight.go_ahead: frozenset({InFlight.none}),
}
