"""The prompt check before every command tries again with a new marker when a try sees no prompt
(a kernel line printed inside the prompt itself, which no pattern of the prompt reads through),
within labgrid's own 30 s in all."""

from __future__ import annotations

import pytest
from pexpect import TIMEOUT

from benchfarm.lab import board


class _Console:
    """What check_prompt uses of a labgrid console: sendline and expect (a fake: pure logic)."""

    def __init__(self, misses: int) -> None:
        self.misses, self.sent, self.waits = misses, [], []

    def sendline(self, line: str) -> None:
        self.sent.append(line)

    def expect(self, pattern: bytes, timeout: float) -> int:
        self.waits.append(timeout)
        if len(self.waits) <= self.misses:
            raise TIMEOUT("no prompt")
        return 0


class _Shell:
    prompt = r"root@[\w-]+:[^ ]+ "

    def __init__(self, console: _Console) -> None:
        self.console = console


@pytest.mark.parametrize("misses", [0, 1, board.PROMPT_TRIES - 1])
def test_a_missed_prompt_is_checked_again_with_a_new_marker(misses):
    console = _Console(misses)
    board.check_prompt(_Shell(console))
    assert len(console.sent) == misses + 1 and len(set(console.sent)) == misses + 1
    assert sum(console.waits) <= 30


def test_no_prompt_in_any_try_is_a_timeout_after_30_s_in_all():
    console = _Console(board.PROMPT_TRIES)
    with pytest.raises(TIMEOUT):
        board.check_prompt(_Shell(console))
    assert len(console.sent) == board.PROMPT_TRIES and sum(console.waits) == 30
