"""What a run's output may cost: a step's parse runs in a child with a CPU and memory budget
(`session.parsing`), and a run's metrics are capped in number and size (`core.policy.budgets`)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from benchfarm.api.devicetype import DeviceType
from benchfarm.api.labpolicy import LabPolicySpec, NamespacePolicy
from benchfarm.api.outcomes import Blame, RunFailure, blame
from benchfarm.core.policy import budgets
from benchfarm.errors import RunError, SuiteFailure
from benchfarm.lab.session import Cancelled
from benchfarm.session.parsing import BudgetedParse
from benchfarm.suites.base import Metric
from benchfarm.suites.registry import parse
from tests.unit.renewals import renewing

SAMPLES = Path(__file__).resolve().parents[3] / "shared" / "samples"
CYCLICTEST = "# /dev/cpu_dma_latency set to 0us\nT: 0 ( 1234) P:99 I:1000 C:   2000 Min:      3 " \
             "Act:    5 Avg:    4 Max:      17\n"


def spin(suite: str, text: str, params: dict[str, str] | None) -> list[Metric]:
    """A parser that never ends (a pattern that backtracks on what the board printed)."""
    n = 0
    while True:
        n += 1


def hog(suite: str, text: str, params: dict[str, str] | None) -> list[Metric]:
    """A parser that keeps what it reads many times over."""
    kept = []
    while True:
        kept.append(bytearray(64 * 1024 * 1024))


def many(suite: str, text: str, params: dict[str, str] | None) -> list[Metric]:
    return [Metric(f"m{i}", float(i)) for i in range(int(text))]


def test_a_parse_in_its_child_gives_what_the_parser_gives():
    got = BudgetedParse(30, 2048)("cyclictest", CYCLICTEST, {})
    assert got == parse("cyclictest", CYCLICTEST, {})
    assert [m.name for m in got][:3] == ["cyclictest-t0-min", "cyclictest-t0-avg",
                                         "cyclictest-t0-max"]


def test_a_parse_error_comes_back_as_the_parsers_own():
    with pytest.raises(SuiteFailure, match="empty output"):
        BudgetedParse(30, 2048)("cyclictest", "   \n", {})


def test_a_runaway_parse_fails_the_run_past_its_cpu_budget_and_the_session_keeps_running():
    with renewing() as lease, pytest.raises(RunError) as err:   # a session's Lease thread
        BudgetedParse(1, 2048, parse=spin)("cyclictest", "000000" + " " * 16000 + "x", {})
    assert err.value.reason == RunFailure.parse_over_budget
    assert blame(err.value.reason) == Blame.run
    assert "1 CPU seconds" in err.value.message
    assert lease.took < 15
    assert len(lease.ticks) >= lease.took / 0.1 * 0.5      # the GIL was free: the thread ran on


def test_a_parse_that_takes_more_memory_than_its_budget_fails_the_run():
    with pytest.raises(RunError) as err:
        BudgetedParse(30, 1024, parse=hog)("shell", "x", {})
    assert err.value.reason == RunFailure.parse_over_budget
    assert "1024 MiB" in err.value.message


def test_a_stopped_session_abandons_its_parse_at_once():
    stop = time.monotonic() + 0.5
    budgeted = BudgetedParse(60, 2048, stopped=lambda: time.monotonic() > stop, parse=spin)
    t = time.monotonic()
    with pytest.raises(Cancelled):
        budgeted("shell", "x", {})
    assert time.monotonic() - t < 5


def test_what_comes_back_is_bounded_by_the_limit_and_says_how_many_there_were():
    budgeted = BudgetedParse(30, 2048, parse=many)
    got = budgeted("shell", "50000", {}, limit=100)
    assert len(got) == 101 and budgeted.count == 50000


def test_the_metric_cap_counts_the_runs_earlier_steps():
    ms = [Metric("a", 1.0), Metric("b", 2.0)]
    assert budgets.over_budget("s", ms, count=2, used=8, cap=10) is None
    problem = budgets.over_budget("s", ms, count=2, used=9, cap=10)
    assert problem is not None and "maxMetricsPerRun" in problem and "10" in problem


def test_a_metric_bigger_than_any_suites_is_refused():
    long = Metric("x" * (budgets.MAX_NAME + 1), 1.0)
    problem = budgets.over_budget("s", [long], count=1, used=0, cap=10)
    assert problem is not None and f"{budgets.MAX_NAME + 1} characters" in problem
    assert len(problem) < 400                   # the tenant's name is quoted, not copied
    labelled = Metric("ok", 1.0, labels={f"k{i}": "v" for i in range(budgets.MAX_LABELS + 1)})
    assert "labels" in (budgets.over_budget("s", [labelled], count=1, used=0, cap=10) or "")
    assert budgets.oversized(Metric("ok", 1.0, labels={"k": "v" * 300})) is not None


def test_the_default_cap_leaves_room_for_the_labs_plans():
    cap = LabPolicySpec().for_namespace("any").maxMetricsPerRun
    assert cap == NamespacePolicy(namespace="x").maxMetricsPerRun == 10000
    hist = SAMPLES / "cyclictest" / "hist100_t2_p99_i1000_l5000.txt"
    if hist.exists():     # a histogram run of 20 iterations, the biggest of the samples
        per_iteration = len(parse("cyclictest", hist.read_text(), {}))
        assert 20 * per_iteration < cap


def test_no_tenant_chosen_string_becomes_a_prometheus_label():
    from benchfarm.operator.state import metrics
    assert metrics.reason_label(RunFailure.too_many_metrics) == "TooManyMetrics"
    assert metrics.reason_label("BoardCrashed") == "BoardCrashed"
    assert metrics.reason_label("a console line the board printed") == metrics.OTHER
    assert metrics.party_label("board") == "board" and metrics.party_label("mallory") == "lab"
    from prometheus_client.metrics import MetricWrapperBase
    lab_defined = {"phase", "reason", "party", "state", "by", "quantile", "device_type", "plan",
                   "outcome", "record"}    # each from a set the lab defines (a typed enum, its
    #                                        device types, TestPlans, or the code's own words)
    labelled = {name: set(m._labelnames) for name, m in vars(metrics).items()
                if isinstance(m, MetricWrapperBase)}
    assert labelled["CHANGE_POINTS"] == {"device_type", "plan"}      # no metric name
    for name, labels in labelled.items():
        assert labels <= lab_defined, (name, labels - lab_defined)


def broken(suite: str, text: str, params: dict[str, str] | None) -> list[Metric]:
    raise ZeroDivisionError("a parser's bug")


def test_a_parsers_bug_comes_back_as_one_not_as_the_runs_fault():
    with pytest.raises(RuntimeError, match="ZeroDivisionError: a parser's bug"):
        BudgetedParse(30, 2048, parse=broken)("shell", "x", {})


class _Stat:
    def __init__(self, size: int) -> None:
        self.size = size


class _Body:
    def __init__(self, data: bytes) -> None:
        self.data = data

    def read(self) -> bytes:
        return self.data

    def close(self) -> None:
        pass

    def release_conn(self) -> None:
        pass


def test_a_document_larger_than_any_session_writes_is_not_read_whole():
    from minio.error import S3Error

    from benchfarm.store.artifacts import MAX_DOCUMENT_BYTES, ArtifactStore, StoreConfig
    objects = {"ns/r/u/metrics.json": b'{"run": {"name": "r"}}', "ns/r/u/list.json": b"[1]",
               "ns/big/u/metrics.json": b"{}"}
    read = []

    class Client:
        def stat_object(self, bucket, key):
            if key not in objects:
                raise S3Error(None, "NoSuchKey", "no such key", key, "req", "host")
            return _Stat(MAX_DOCUMENT_BYTES + 1 if "big" in key else len(objects[key]))

        def get_object(self, bucket, key):
            read.append(key)
            return _Body(objects[key])

    store = ArtifactStore(StoreConfig("127.0.0.1:1", "a", "b", "bucket"), attempts=1)
    store.client = Client()
    assert store.get_document("ns/r/u/metrics.json") == {"run": {"name": "r"}}
    assert store.get_document("ns/big/u/metrics.json") is None       # a forged 64 MiB one
    assert store.get_document("ns/r/u/list.json") is None            # no JSON object
    assert store.get_document("ns/none/u/metrics.json") is None
    assert "ns/big/u/metrics.json" not in read                        # never downloaded


def test_no_lab_policy_lets_a_run_yield_more_than_a_document_the_lab_reads():
    from pydantic import ValidationError

    from benchfarm.store.artifacts import MAX_DOCUMENT_BYTES
    with pytest.raises(ValidationError):
        NamespacePolicy(namespace="x", maxMetricsPerRun=100_001)
    assert 100_000 * 300 < MAX_DOCUMENT_BYTES         # about 280 bytes a metric in metrics.json


class _Board:
    """A board session that prints `n` timing lines per step, parsed by the real parser."""

    def __init__(self, lines: int) -> None:
        self.lines = lines
        self.cancelled = threading.Event()

    def suite(self, spec, iteration, warmup, parse=parse, **_):
        from benchfarm.core.statistics.results import SuiteRecord
        output = "".join(f"k_{i} {i}\n" for i in range(self.lines))
        record = SuiteRecord(step=spec.name, suite=spec.suite, iteration=iteration,
                             warmup=warmup, exit_code=0, seconds=0.1)
        record.metrics = parse(spec.suite, output, dict(spec.parameters))
        return record, output, {}


def _steps(cap: int, lines: int, budgeted: bool):
    from types import SimpleNamespace

    from benchfarm.api.runs import BenchmarkRunSpec, SuiteSpec
    from benchfarm.session.steps import StepRunner
    suite = SuiteSpec(name="timing", suite="console-timing", command="timings",
                      parameters={"clockMHz": "100"})
    put = []
    ctx = SimpleNamespace(
        prefix="ns/r/u", suites=[suite], iterations=lambda: 3,
        spec=BenchmarkRunSpec(selector={"deviceType": "qemu-x86"}, suites=[suite], iterations=3),
        spool=SimpleNamespace(put=lambda key, data, ctype: put.append(key) or f"s3://b/{key}"),
        status=SimpleNamespace(progress=lambda *a, **k: None))
    runner = StepRunner.__new__(StepRunner)         # the steps' own state, without a board
    runner.ctx, runner.session = ctx, _Board(lines)
    runner.dtype = DeviceType(name="qemu-x86", labgrid="qemu-x86.labgrid.yaml", boot={})
    runner.steps_done, runner.steps_total = 0, 3
    runner.parse = BudgetedParse(30, 2048) if budgeted else None
    runner.max_metrics, runner.metrics_used = cap, None
    runner.checkpoints = lambda: []
    return runner, put


@pytest.mark.parametrize("budgeted", [False, True])
def test_the_step_that_goes_past_the_runs_metric_cap_fails_the_run(budgeted):
    from benchfarm.core import steps as st
    runner, put = _steps(cap=500, lines=100, budgeted=budgeted)     # 200 metrics a step
    step = [st.Step(st.SUITE, f"suite-{i}", iteration=i) for i in (1, 2, 3)]
    assert len(runner.run_step(step[0])["record"]["metrics"]) == 200
    runner.run_step(step[1])
    with pytest.raises(RunError) as err:
        runner.run_step(step[2])                                    # 600 > 500
    assert err.value.reason == RunFailure.too_many_metrics
    assert "step timing yielded 200 metrics; with the 400" in err.value.message
    assert put[-1] == "ns/r/u/raw/timing/iteration-003.txt"        # its output is kept


def test_a_resumed_session_counts_the_metrics_its_attempt_checkpointed():
    from benchfarm.core import steps as st
    runner, _ = _steps(cap=500, lines=100, budgeted=False)
    runner.checkpoints = lambda: [{"kind": st.SUITE, "record": {"metrics": [{}] * 400}},
                                  {"kind": st.BOOT}]
    with pytest.raises(RunError):
        runner.run_step(st.Step(st.SUITE, "suite-3", iteration=3))
    assert runner.metrics_used == 400


def test_an_output_over_its_budget_ends_the_run_a_parse_error_fails_the_suite():
    from types import SimpleNamespace

    from benchfarm.api.runs import SuiteSpec
    from benchfarm.lab.session import BoardSession
    printed = SimpleNamespace(output="000000" + " " * 16000 + "x\n", exit_code=0, seconds=1.0,
                              timed_out=False)
    board = BoardSession.__new__(BoardSession)        # the board's side only: one command
    board.cancelled, board.deadline, board.environment = threading.Event(), time.monotonic() + 60, {}
    board.board = SimpleNamespace(run=lambda cmd, timeout: printed)
    board.device_type = DeviceType(name="qemu-x86", labgrid="qemu-x86.labgrid.yaml", boot={})
    spec = SuiteSpec(name="latency", suite="cyclictest", command="cyclictest -q")
    record, output, _ = board.suite(spec, 1, False)          # the parser's own error
    assert record.error and "cyclictest" in record.error and not record.metrics
    with pytest.raises(RunError) as err:                     # past its budget: the run's end
        board.suite(spec, 1, False, BudgetedParse(1, 2048, parse=spin))
    assert err.value.reason == RunFailure.parse_over_budget
