"""The dashboard's history from the store (web.history.StoreHistorySource) holds the newest runs'
points only, bounded in runs and in bytes: a lab without the results database has many runs,
and each run's figures are as many as its tenant printed (up to maxMetricsPerRun)."""

from __future__ import annotations

from benchfarm.web.history import StoreHistorySource, points_bytes


def _run(i: int, ns: str = "team-a") -> dict:
    return {"metadata": {"namespace": ns, "name": f"r{i}", "uid": f"uid-{i}"},
            "spec": {"plan": "p", "selector": {"deviceType": "qemu-x86"}},
            "status": {"phase": "Succeeded", "completionTime": f"2026-12-01T00:{i // 60:02d}:"
                       f"{i % 60:02d}Z", "board": "vb-x86-0"}}


def _doc(metrics: int, samples: int = 2) -> dict:
    return {"series": [{"step": "s", "name": f"m{k}", "unit": "s", "values": [1.0] * samples}
                       for k in range(metrics)]}


class FakeKube:
    def __init__(self, runs):
        self.runs = runs

    def list_runs(self):
        return list(self.runs)


class FakeStore:
    def __init__(self, docs):
        self.docs, self.reads = docs, []

    def get_document(self, key):
        self.reads.append(key)
        return self.docs(key)


def _source(runs, docs, **limits):
    src = StoreHistorySource(FakeKube(runs), FakeStore(docs), **limits)
    src._listed = (float("-inf"), [])
    return src


def _listing(src):
    src._listed = (float("-inf"), [])          # past LIST_TTL: the runs listed again
    return src._points()


def test_each_document_is_read_once_while_its_run_is_kept():
    src = _source([_run(i) for i in range(5)], lambda key: _doc(3))
    assert len(_listing(src)) == 15
    _listing(src)
    assert len(src.store.reads) == 5
    assert {p["run"] for _, p in _listing(src)} == {f"team-a/r{i}" for i in range(5)}


def test_the_newest_runs_are_kept_up_to_a_number_of_runs():
    src = _source([_run(i) for i in range(50)], lambda key: _doc(1), max_runs=10)
    points = _listing(src)
    assert len(src._docs) == 10
    assert {p["run"] for _, p in points} == {f"team-a/r{i}" for i in range(40, 50)}


def test_the_points_kept_are_bounded_in_bytes():
    one = points_bytes(_source([_run(39)], lambda key: _doc(100))._read(_run(39)))
    src = _source([_run(i) for i in range(40)], lambda key: _doc(100), max_bytes=10 * one)
    _listing(src)
    assert sorted(src._docs) == [f"uid-{i}" for i in range(30, 40)]      # the newest ten
    assert sum(size for _, size in src._docs.values()) <= 10 * one


def test_one_huge_run_is_left_out_and_crowds_out_nothing():
    one = points_bytes(_source([_run(0)], lambda key: _doc(10))._read(_run(0)))
    runs = [_run(i) for i in range(5)]
    src = _source(runs, lambda key: _doc(100_000 if "r4/" in key else 10), max_bytes=40 * one)
    points = _listing(src)
    assert {p["run"] for _, p in points} == {f"team-a/r{i}" for i in range(4)}
    _listing(src)
    assert sum("r4/" in k for k in src.store.reads) == 1     # not read again: known too big


def test_a_deleted_runs_points_go():
    runs = [_run(i) for i in range(3)]
    src = _source(runs, lambda key: _doc(2))
    _listing(src)
    del runs[0]
    _listing(src)
    assert set(src._docs) == {"uid-1", "uid-2"}
