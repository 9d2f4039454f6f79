"""Issue 12 on the real stack: what a run costs the API server, counted by the API server.

The kube-apiserver of the lab keeps an audit log of every write to benchfarm's objects, Leases
and Events; a run's writes are read from there, not from our own bookkeeping.
"""

from __future__ import annotations

import collections

import pytest

from tests.stack.conftest import apply, wait_for
from tests.stack.runs import api_writes, cond, finished, run_yaml, unique
from tests.stack.test_operator import custom  # noqa: F401

pytestmark = pytest.mark.stack

BUDGET = 10     # writes to the BenchmarkRun (object and status) per run


def test_a_run_costs_at_most_ten_writes_to_its_benchmarkrun(custom):  # noqa: F811
    name = unique("writes")
    apply(run_yaml(name, plan="demo", iterations=2, bootCycles=2))
    st = finished(custom, name, timeout=300)
    assert cond(st)["status"] == "True", st
    writes = wait_for("the audit log to show the final write",
                      lambda: (w := api_writes("default", name))["run"] and w, timeout=10)
    by = collections.Counter(writes["run"])
    print(f"\n{name}: {len(writes['run'])} BenchmarkRun writes, {len(writes['lease'])} writes "
          f"to its session Lease (renewals: the runner's proof of life)")
    for (who, verb, sub), n in sorted(by.items()):
        print(f"  {n:3d}  {verb:6s} {sub or '(object)':8s} by {who}")
    assert len(writes["run"]) <= BUDGET, by
