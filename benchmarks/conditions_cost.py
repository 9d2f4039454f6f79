#!/usr/bin/env python3
"""What recording a suite step's conditions costs on the board (issue 56: at most 2 % of its
board time): the same suite step run alternately as it is and wrapped in the conditions probe
(`core.readings.conditions.wrap`: a snapshot before and after, the sampler every
intervalSeconds), on a virtual board through labgrid as a session runs it. Prints the command's
seconds both ways (what the session waits for the board), the suite's own figure both ways (the
sampler's CPU on the board would lower it), and one snapshot's round trip (what waiting for the
envelope costs a step already inside it). The rails are sampled by the lab, not the board: they
cost it nothing.

Needs the lab (`make lab-up`). Usage: conditions_cost.py [PLACE] [PAIRS] [SECONDS]
(defaults: vb-x86-1 6 6). Prints figures, asserts nothing.
"""

from __future__ import annotations

import os
import re
import statistics
import sys
import time

import benchfarm_devlab as devlab
from benchfarm.core.readings import conditions
from benchfarm.lab.board import Board
from benchfarm.lab.coordinator import Coordinator
from benchfarm.lab.devicetypes import load_device_types
from benchfarm.settings import Settings

EVENTS = re.compile(r"events per second:\s*([0-9.]+)")


def main() -> None:
    place = sys.argv[1] if len(sys.argv) > 1 else "vb-x86-1"
    pairs = int(sys.argv[2]) if len(sys.argv) > 2 else 6
    seconds = int(sys.argv[3]) if len(sys.argv) > 3 else 6
    command = f"sysbench cpu --threads=1 --time={seconds} run"
    env = devlab.lab_env()
    c = Coordinator.from_settings(Settings.from_env(), address=env["LG_COORDINATOR"],
                                  user=os.environ.get("USER", "bench"), host="conditions-cost")
    info = c.places()[place]
    dt = load_device_types(devlab.DEVICE_TYPES)[info.tags["device_type"]]
    assert dt.conditions is not None, f"{dt.name} has no conditions source"
    c.acquire(place)
    took: dict[str, list[float]] = {"plain": [], "wrapped": []}
    events: dict[str, list[float]] = {"plain": [], "wrapped": []}
    probes: list[float] = []
    during: list[int] = []
    try:
        board = Board(place, c.places()[place].resources, dt, c.session())
        board.boot()
        for line in conditions.install(dt.conditions):   # the probe's functions, as a session
            r = board.run(line, timeout=30)              # writes them once a boot
            assert r.exit_code == 0, r
        board.run(command, timeout=120)                  # warm: the binary in the page cache
        for i in range(pairs):
            for kind in (("plain", "wrapped") if i % 2 == 0 else ("wrapped", "plain")):
                cmd, markers = (command, None) if kind == "plain" else \
                    conditions.wrap(command, dt.conditions)
                sent = time.time()
                r = board.run(cmd, timeout=120)
                output = r.output
                if markers is not None:
                    got = conditions.unwrap(output, markers, sent, time.time())
                    output = got.output
                    during.append(len(got.during))
                    assert got.before is not None and got.after is not None, output[-300:]
                took[kind].append(r.seconds)
                events[kind].append(float(EVENTS.search(output).group(1)))  # type: ignore[union-attr]
            start = time.monotonic()
            board.run(conditions.probe(dt.conditions), timeout=30)
            probes.append(time.monotonic() - start)
            print(f"pair {i + 1}/{pairs}: plain {took['plain'][-1]:.3f} s, wrapped "
                  f"{took['wrapped'][-1]:.3f} s ({during[-1]} snapshots during); events/s "
                  f"{events['plain'][-1]:.1f} / {events['wrapped'][-1]:.1f}", flush=True)
        board.power_off()
        board.close()
    finally:
        c.release(place)
        c.close()
    plain, wrapped = statistics.median(took["plain"]), statistics.median(took["wrapped"])
    ep, ew = statistics.median(events["plain"]), statistics.median(events["wrapped"])
    print(f"\n{place} ({dt.name}), `{command}`, {pairs} pairs, interval "
          f"{dt.conditions.intervalSeconds:g} s:")
    print(f"  board time, median: plain {plain:.3f} s, wrapped {wrapped:.3f} s: "
          f"{wrapped - plain:+.3f} s ({(wrapped - plain) / plain * 100:+.2f} %)")
    print(f"  board time, min:    plain {min(took['plain']):.3f} s, wrapped "
          f"{min(took['wrapped']):.3f} s")
    print(f"  sysbench events/s, median: plain {ep:.1f}, wrapped {ew:.1f} "
          f"({(ew - ep) / ep * 100:+.2f} %)")
    print(f"  one snapshot's round trip (waiting for the envelope): median "
          f"{statistics.median(probes):.3f} s")


if __name__ == "__main__":
    main()
