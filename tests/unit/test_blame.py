"""Who is to blame, as the session decides it (`session.blame.verdict`) and the operator reads it."""

from __future__ import annotations

import pytest

from benchfarm.api.outcomes import FINISHED, HandBack, Phase, Reason, SessionEnd
from benchfarm.errors import BoardBusy, BoardFault, InfraError, Outage, Party, RunError
from benchfarm.lab.session import Cancelled
from benchfarm.session.blame import Settled, verdict


@pytest.mark.parametrize("exc,settled,hand_back,touches", [
    (None, Settled.completed, None, True),
    (Cancelled("run cancelled"), Settled.cancelled, None, True),
    (BoardFault("no prompt", reason="BootTimeout"), Settled.handed_back, HandBack.board_fault, True),
    (BoardBusy("held by desk/alice"), Settled.handed_back, HandBack.busy, False),
    (RunError("crashed it", reason=Reason.run_crashed_board), Settled.failed, None, True),
    (InfraError("PDU down", reason="PowerFailed"), Settled.handed_back, HandBack.lab_fault, True),
    (Outage("store", party=Party.store), Settled.handed_back, HandBack.lab_fault, True),
    (KeyError("bug"), Settled.internal, None, True)])
def test_every_way_the_steps_end_has_one_decision(exc, settled, hand_back, touches):
    v = verdict(exc)
    assert (v.settled, v.hand_back, v.touches_board) == (settled, hand_back, touches)


def test_only_a_board_fault_is_the_boards_and_a_crashed_run_proves_the_board_fine():
    assert {r for r in Reason if r.board_is_fine} == {
        Reason.completed, Reason.suites_failed, Reason.run_crashed_board,
        Reason.software_boot_failed}
    assert FINISHED == {Phase.succeeded, Phase.failed, Phase.cancelled}
    assert all(p.finished == (p in FINISHED) for p in Phase)


def test_a_session_end_round_trips_through_the_status_as_plain_json():
    end = SessionEnd(attempt=2, outcome=HandBack.busy, reason="BoardBusy", message="held")
    raw = end.model_dump(mode="json")
    assert raw["outcome"] == "Busy" and isinstance(raw["outcome"], str)
    assert SessionEnd.model_validate(raw) == end
    assert f"{Phase.running}" == "Running" and str(Reason.run_crashed_board) == "RunCrashedBoard"
