"""A stack test's boot, retried as a session retries it.

`lab.session` power-cycles a board again when a boot fails on the board's side, up to its device
type's `boot.retries`; a test that calls `Board.boot` directly had no such second try, so a boot
that hung before the kernel's banner (QEMU's TCG does, about one x86 boot in thirty, on an idle
host too) failed the test rather than costing one more power cycle. The limit that catches the
hang stays as it is: a retry is what the device type says a hang costs.
"""

from __future__ import annotations

from benchfarm.core.readings.boot import BootTimeline
from benchfarm.errors import BoardFault, DeployedBootFailed
from benchfarm.lab.board import Board


def boot(board: Board) -> BootTimeline:
    """Boot `board` to its shell, power-cycling again after a board-side failure up to
    `boot.retries` times; a deployed build that fails is not retried (it would fail again)."""
    failed: list[BoardFault] = []
    while True:
        try:
            return board.boot()
        except DeployedBootFailed:
            raise
        except BoardFault as exc:
            failed.append(exc)
            if len(failed) > board.device_type.boot.retries:
                raise
