#!/usr/bin/env python3
"""What recording the conditions costs a run's board time (issue 56: at most 2 %): the same
run done alternately as it would be without them and as a session does it with them, on a
virtual board through labgrid and `lab.session.BoardSession` (the session's own code: the probe
installed after the boot, each suite wrapped, the envelope waited for, the rails sampled).

A run here is what `make demo`'s is by default (testplans/examples/demo-run.yaml): its timed
boots, the provenance probes and its plan's suites for its iterations; its board time runs from
the opening of its console to its power-off (the board is the run's all that time). The boots
are the same both ways (the probe runs at the shell, after them) and vary by seconds from one
to the next, so the figures are given for the whole run and for what follows the boots, each
also as the median of the pairs' differences. "plain" is the device type
without `conditions`, `envelope` or rails, as before issue 56; "recorded" is the device type as
shipped. Besides the totals it prints what the envelope waited for: a board still busy with its
own boot (a TCG board is, for a few seconds) is the envelope doing its job, not the sampling's
cost, so the cost is printed with and without those seconds.

Needs the lab (`make lab-up`). Usage: conditions_cost.py [PLACE] [PAIRS] [RUN]
(defaults: vb-x86-1 5 testplans/examples/demo-run.yaml). Prints figures, asserts nothing.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

import yaml

import benchfarm_devlab as devlab
from benchfarm.api.conditions import Envelope
from benchfarm.api.devicetype import DeviceType
from benchfarm.api.runs import SuiteSpec
from benchfarm.lab.coordinator import Coordinator
from benchfarm.lab.devicetypes import load_device_types
from benchfarm.lab.session import POLL_SECONDS, BoardSession
from benchfarm.settings import Settings

ROOT = Path(__file__).resolve().parent.parent


def one_run(c: Coordinator, place: str, dt: DeviceType, suites: list[SuiteSpec],
            boots: int, iterations: int) -> tuple[float, float, float, int]:
    """(board seconds, of which the boots', seconds the envelope waited for a board outside
    it, suite records) of one run (a look that found the board inside is the sampling's cost,
    not counted as waiting)."""
    start = time.monotonic()      # the board is the run's from its console's opening
    s = BoardSession(place, c.places()[place].resources, dt, c.session(),
                     deadline=time.monotonic() + 900)
    waited, records = 0.0, 0
    try:
        for _ in range(boots):
            s.boot()
        booted = time.monotonic() - start
        s.provenance(suites)
        for iteration in range(1, iterations + 1):
            for spec in suites:
                envelope = (dt.envelope or Envelope()).tightened(spec.envelope) \
                    if dt.envelope is not None else None
                record, _, _ = s.suite(spec, iteration, False, envelope=envelope)
                assert record.ok, (spec.name, record.error)
                w = (record.conditions or {}).get("waitedSeconds") or 0.0
                waited += w if w >= POLL_SECONDS else 0.0   # found outside at least once
                records += 1
    finally:
        s.power_off_and_close()
    return time.monotonic() - start, booted, waited, records


def main() -> None:
    place = sys.argv[1] if len(sys.argv) > 1 else "vb-x86-1"
    pairs = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    run = yaml.safe_load((Path(sys.argv[3]) if len(sys.argv) > 3 else
                          ROOT / "testplans/examples/demo-run.yaml").read_text())["spec"]
    plan = ROOT / "testplans" / f"{run['plan']}.yaml"
    boots, iterations = int(run.get("bootCycles") or 1), int(run.get("iterations") or 1)
    suites = [SuiteSpec.model_validate(s) for s in yaml.safe_load(plan.read_text())["spec"]
              ["suites"]]
    env = devlab.lab_env()
    c = Coordinator.from_settings(Settings.from_env(), address=env["LG_COORDINATOR"],
                                  user=os.environ.get("USER", "bench"), host="conditions-cost")
    info = c.places()[place]
    recorded = load_device_types(devlab.DEVICE_TYPES)[info.tags["device_type"]]
    assert recorded.conditions is not None, f"{recorded.name} has no conditions source"
    plain = recorded.model_copy(update={"conditions": None, "envelope": None, "rails": []})
    took: dict[str, list[float]] = {"plain": [], "recorded": []}
    rest: dict[str, list[float]] = {"plain": [], "recorded": []}   # after the boots
    waits: list[float] = []
    c.acquire(place)
    try:
        for i in range(pairs):
            for kind in (("plain", "recorded") if i % 2 == 0 else ("recorded", "plain")):
                seconds, booted, waited, records = one_run(
                    c, place, plain if kind == "plain" else recorded, suites, boots, iterations)
                took[kind].append(seconds)
                rest[kind].append(seconds - booted)
                if kind == "recorded":
                    waits.append(waited)
            print(f"pair {i + 1}/{pairs}: plain {took['plain'][-1]:.2f} s (after the boots "
                  f"{rest['plain'][-1]:.2f} s), recorded {took['recorded'][-1]:.2f} s (after "
                  f"the boots {rest['recorded'][-1]:.2f} s; the envelope waited "
                  f"{waits[-1]:.2f} s), {records} suite steps a run", flush=True)
    finally:
        c.release(place)
        c.close()
    p, r, w = (statistics.median(took["plain"]), statistics.median(took["recorded"]),
               statistics.median(waits))
    rp, rr = statistics.median(rest["plain"]), statistics.median(rest["recorded"])
    print(f"\n{place} ({recorded.name}), plan {plan.name}, {boots} boots, {iterations} "
          f"iterations, {pairs} pairs; board time a run (console opened to board off), median:")
    paired = statistics.median(b - a for a, b in zip(took["plain"], took["recorded"],
                                                       strict=True))
    print(f"  the whole run: plain {p:.2f} s, recorded {r:.2f} s: {r - p:+.2f} s "
          f"({(r - p) / p * 100:+.2f} %); the median of the pairs' differences "
          f"{paired:+.2f} s ({paired / p * 100:+.2f} %)")
    after = statistics.median(b - a for a, b in zip(rest["plain"], rest["recorded"],
                                                      strict=True))
    print(f"  after the boots: plain {rp:.2f} s, recorded {rr:.2f} s: {rr - rp:+.2f} s, "
          f"{(rr - rp) / p * 100:+.2f} % of the plain run's board time; the median of the "
          f"pairs' differences {after:+.2f} s ({after / p * 100:+.2f} %)")
    print(f"  the envelope waited for a board outside it {w:.2f} s a run (median); the rest "
          f"costs {rr - rp - w:+.2f} s ({(rr - rp - w) / p * 100:+.2f} % of the run)")


if __name__ == "__main__":
    main()
