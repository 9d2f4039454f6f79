#!/usr/bin/env python3
"""Boot times of the virtual boards through labgrid: min / median / max of N power cycles.

Needs the lab (`make lab-up`); takes a place as a labgrid client like the operator does.
Usage: boot_times.py [PLACE] [N]   (defaults: vb-x86-1 5). Prints figures, asserts nothing.
"""

from __future__ import annotations

import os
import statistics
import sys

import benchfarm_devlab as devlab
from benchfarm.lab.board import Board
from benchfarm.lab.coordinator import Coordinator
from benchfarm.lab.devicetypes import load_device_types
from benchfarm.settings import Settings


def main() -> None:
    place = sys.argv[1] if len(sys.argv) > 1 else "vb-x86-1"
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    env = devlab.lab_env()
    c = Coordinator.from_settings(Settings.from_env(), address=env["LG_COORDINATOR"],
                                  user=os.environ.get("USER", "bench"), host="boot-times")
    info = c.places()[place]
    dt = load_device_types(devlab.DEVICE_TYPES)[info.tags["device_type"]]
    c.acquire(place)
    phases: dict[str, list[float]] = {}
    try:
        board = Board(place, c.places()[place].resources, dt, c.session())
        for i in range(n):
            tl = board.boot()
            for k, v in {**tl.fused, **tl.phases(dt.boot.phases)}.items():
                phases.setdefault(k, []).append(v)
            host = {k: round(v - tl.events.get("kernel", 0.0), 3) for k, v in tl.events.items()}
            clock = tl.kernel
            agree = (f"kernel clock: time zero {clock.offset:.3f} s after power-on, rate "
                     f"{clock.rate:.4f}; host - fused median {clock.median_ms} ms, p95 "
                     f"{clock.p95_ms} ms over {clock.lines - clock.held} live lines "
                     f"({clock.held} held); after a pause median {clock.quiet_median_ms} ms, "
                     f"p95 {clock.quiet_p95_ms} ms over {clock.quiet_lines} lines; "
                     f"kernel-to-prompt by the host alone "
                     f"{host.get('prompt')} s" if clock else "no printk stamps")
            if clock:
                for k, v in {"clock rate": clock.rate, "live median (ms)": clock.median_ms,
                             "live p95 (ms)": clock.p95_ms,
                             "after a pause median (ms)": clock.quiet_median_ms,
                             "after a pause p95 (ms)": clock.quiet_p95_ms}.items():
                    if v is not None:
                        phases.setdefault(k, []).append(v)
            print(f"boot {i + 1}/{n}: kernel-to-prompt {tl.phase('kernel', 'prompt')} s, "
                  f"power-to-prompt {tl.phase('power-on', 'prompt')} s; {agree}", flush=True)
        board.power_off()
        board.close()
    finally:
        c.release(place)
        c.close()
    print(f"\n{place} ({dt.name}), {n} boots, seconds from power-on confirmed by the PDU:")
    print(f"{'event/phase':26} {'min':>7} {'median':>7} {'max':>7}")
    for k, v in phases.items():
        d = 4 if k == "clock rate" else 2
        print(f"{k:26} {min(v):7.{d}f} {statistics.median(v):7.{d}f} {max(v):7.{d}f}")


if __name__ == "__main__":
    main()
