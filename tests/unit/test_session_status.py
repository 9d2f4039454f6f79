"""What a session writes to its run goes through the same typed patch as the operator's writes
(`core.scheduling.transitions.typed`, `api.runs.BenchmarkRunStatusPatch`): its progress, its end and its
hand-back are what the model says, and a field the model does not have fails where it is
written instead of landing in the status where nothing reads it."""

from __future__ import annotations

import threading

import pytest
from pydantic import ValidationError

from benchfarm.api.outcomes import HandBack, Phase, Underway
from benchfarm.errors import InfraError
from benchfarm.session.status import StatusWriter


class Kube:
    outage_budget = 600.0

    def __init__(self) -> None:
        self.patches: list[dict] = []
        self.events: list[tuple] = []

    def patch_run_status(self, ns, name, status):
        self.patches.append(status)
        return {"status": status}

    def event(self, ref, type_, reason, message):
        self.events.append((type_, reason))


class Lifeline:
    def __init__(self) -> None:
        self.deleting = threading.Event()

    def check(self) -> None:
        pass

    def wait_out(self, what, fn):
        return fn()

    def cancelled(self, *, deleting: bool) -> None:
        pass


@pytest.fixture
def writer():
    body = {"apiVersion": "benchfarm.io/v1alpha1",
            "metadata": {"namespace": "team-a", "name": "r", "uid": "u", "generation": 2},
            "status": {"phase": "Running"}}
    kube = Kube()
    w = StatusWriter(kube, Lifeline(), body)
    w.quick = kube
    return w, kube


def test_progress_the_end_and_a_hand_back_are_typed_patches(writer):
    w, kube = writer
    w.progress("boot-1 done", Underway.booting, force=True,
               extra={"checkpoint": {"attempt": 1, "done": 1, "total": 3, "last": "boot-1"},
                      "bootSeconds": "7.87 (min 7.52, max 8.22)", "boardReleased": True})
    w.finish(Phase.succeeded, "Succeeded", "all suites passed", extra={"results": {"boot": {}}})
    w.hand_back(2, HandBack.board_fault, InfraError("serial silent", reason="SerialSilent"))
    progress, end, handed = kube.patches
    assert progress["checkpoint"] == {"attempt": 1, "done": 1, "total": 3, "last": "boot-1"}
    assert progress["conditions"][0]["reason"] == Underway.booting
    assert end["phase"] == "Succeeded" and end["observedGeneration"] == 2
    assert handed["sessionEnd"]["outcome"] == HandBack.board_fault.value
    assert handed["sessionEnd"]["reason"] == "SerialSilent"
    assert kube.events == [("Normal", "Succeeded")]


def test_a_field_the_status_does_not_have_is_an_error_where_it_is_written(writer):
    w, kube = writer
    with pytest.raises(ValidationError, match="bootSecs"):
        w.write({"bootSecs": "7.9"})
    with pytest.raises(ValidationError, match="checkpoint"):
        w.write({"checkpoint": {"attempt": "first"}})
    assert kube.patches == []
