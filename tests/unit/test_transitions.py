"""What each of the operator's run transitions writes (`core.scheduling.transitions`): the fields it resets,
the conditions it moves, and that an unchanged condition keeps its transition time."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from benchfarm.api.grants import GO_AHEAD_FIELD, Relay
from benchfarm.api.outcomes import Phase, Reason, Underway
from benchfarm.api.runs import BenchmarkRunStatus, BenchmarkRunStatusPatch
from benchfarm.core.conditions import get_condition
from benchfarm.core.policy import trust
from benchfarm.core.scheduling import transitions as t

KEY = b"k" * 32
RUNNING = {"phase": "Running", "board": "p1", "attempts": 2, "resumes": 1,
           "boardReleased": True, "sessionEnd": {"attempt": 2, "outcome": "BoardFault"},
           GO_AHEAD_FIELD: {"attempt": 2, "signature": "s"},
           "avoidBoards": ["p0"],
           "conditions": [{"type": "Succeeded", "status": "Unknown", "reason": "Running",
                           "message": "suite 1", "lastTransitionTime": "2026-11-28T10:00:00Z"}]}


def cond(patch, type_):
    found = get_condition(patch["conditions"], type_)
    assert found is not None, patch["conditions"]
    return found


def test_every_transition_writes_a_status_the_typed_model_reads_and_nothing_else():
    go = trust.sign_go_ahead(KEY, "u", 3)
    patches = [
        t.admitted({}, 1, plan_digest="d", resolved=[], signature="sig", prefix="team/r/u"),
        t.finished(RUNNING, 2, Phase.failed, "BoardFault", "it broke"),
        t.cancelled_before_start({"phase": "Pending"}, 1),
        t.launched({"phase": "Pending"}, 1, board="p2", attempt=3, go_ahead=go),
        t.requeued(RUNNING, 2, "board fault on p1", ["p0", "p1"], busy_requeues=1),
        t.go_ahead(go), t.relay(go), t.resumed(2, 3, go), t.queue_position(None),
        t.queue_position(2),
    ]
    session = {"startTime": "2026-11-28T10:00:00Z", "bootSeconds": "7.87 (min 7.52, max 8.22)",
               "checkpoint": {"attempt": 2, "done": 3, "total": 8, "last": "boot-3"},
               "results": {"boot": {}}, "artifacts": ["s3://b/team/r/u/report.md"],
               "provenance": {"kernel": "sha256:0"}, "boardReleased": True}
    BenchmarkRunStatusPatch.model_validate(session)             # what the session writes too
    for patch in patches:
        BenchmarkRunStatus.model_validate({**RUNNING, **patch})
        assert json.loads(json.dumps(patch)) == patch          # a JSON merge patch as it is
    with pytest.raises(ValidationError, match="baord"):        # what a typo would write
        BenchmarkRunStatusPatch.model_validate({"baord": "p1"})
    with pytest.raises(ValidationError, match="goAhead"):
        BenchmarkRunStatusPatch.model_validate({"goAhead": {"attempt": "second"}})


def test_a_requeued_run_loses_its_board_go_ahead_and_session_end_and_keeps_what_it_avoids():
    patch = t.requeued(RUNNING, 2, "board fault on p1", ["p0", "p1"])
    assert patch["phase"] == Phase.pending and patch["board"] is None
    assert patch[GO_AHEAD_FIELD] is None and patch["sessionEnd"] is None
    assert patch["avoidBoards"] == ["p0", "p1"] and "busyRequeues" not in patch
    assert (cond(patch, "Scheduled")["status"], cond(patch, "Scheduled")["reason"]) == \
        ("False", Underway.requeued)
    succeeded = cond(patch, "Succeeded")
    assert (succeeded["status"], succeeded["reason"]) == ("Unknown", Underway.queued)
    # Unknown before and after: the condition's transition time stays
    assert succeeded["lastTransitionTime"] == "2026-11-28T10:00:00Z"
    assert t.requeued(RUNNING, 2, "held", [], busy_requeues=3)["busyRequeues"] == 3


def test_a_launch_starts_the_attempt_afresh_seated_or_on_standby():
    seated = t.launched({"phase": "Pending"}, 4, board="p2", attempt=3,
                        go_ahead=trust.sign_go_ahead(KEY, "u", 3))
    assert (seated["phase"], seated["board"], seated["attempts"], seated["resumes"]) == \
        (Phase.running, "p2", 3, 0)
    assert seated["boardReleased"] is False and seated["sessionEnd"] is None
    assert seated["progress"] == "starting the session"
    assert cond(seated, "Scheduled")["reason"] == Underway.board_assigned
    assert cond(seated, "Succeeded")["observedGeneration"] == 4
    relay = Relay(place="p0", holder="benchfarm/run-h")
    for go in (None, trust.sign_go_ahead(KEY, "u", 3, relay)):
        standby = t.launched({"phase": "Pending"}, 4, board="p2", attempt=3, go_ahead=go)
        assert standby[GO_AHEAD_FIELD] == go
        assert standby["progress"].startswith("on standby")


def test_finishing_sets_the_outcome_and_leaves_the_queue():
    ok = t.finished(RUNNING, 2, Phase.succeeded, Reason.completed, "done")
    assert cond(ok, "Succeeded")["status"] == "True" and ok["queuePosition"] is None
    assert ok["completionTime"] and ok["observedGeneration"] == 2
    cancelled = t.cancelled_before_start({"phase": "Pending"}, 1)
    assert cancelled["phase"] == Phase.cancelled
    assert (cond(cancelled, "Succeeded")["status"], cond(cancelled, "Succeeded")["reason"]) == \
        ("False", Reason.cancelled)


def test_a_resume_replaces_a_relay_only_when_given_a_plain_go_ahead():
    assert GO_AHEAD_FIELD not in t.resumed(1, 3)
    go = trust.sign_go_ahead(KEY, "u", 2)
    resumed = t.resumed(2, 3, go)
    assert resumed[GO_AHEAD_FIELD] == go and resumed["progress"] == "session lost; resuming (2/3)"


def test_a_cleared_field_is_written_as_null_and_an_unset_one_not_at_all():
    assert t.queue_position(None) == {"queuePosition": None}       # a merge patch's delete
    assert t.queue_position(1) == {"queuePosition": 1}
    assert set(t.relay(trust.sign_go_ahead(KEY, "u", 1))) == {GO_AHEAD_FIELD}
