"""The operator's change-point worker leaves with the operator, even one killed with kill -9, and
yields the CPU in a session of its own."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from benchfarm.cpu import NO_BOARD_WAITS, group_nice

PARENT = r"""
import multiprocessing, os, sys, time
from concurrent.futures import ProcessPoolExecutor
from benchfarm.operator.stores.indexer import worker_start
if __name__ == "__main__":
    pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"),
                               initializer=worker_start, initargs=(os.getpid(),))
    print(pool.submit(os.getpid).result(), flush=True)
    # a forked child keeps the pool's pipes open: the worker must not wait for an end of file
    if os.fork() == 0:
        time.sleep(60)
        os._exit(0)
    time.sleep(60)
"""


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_the_worker_exits_when_its_operator_is_killed(tmp_path):
    script = tmp_path / "parent.py"
    script.write_text(PARENT)
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True,
                              env={**os.environ}, start_new_session=True)
    worker = 0
    try:
        worker = int(parent.stdout.readline())
        assert _alive(worker) and os.getpriority(os.PRIO_PROCESS, worker) == NO_BOARD_WAITS
        # a session, and where the kernel groups by session a group, of its own at nice 10:
        # in its operator's it would take the share the lab gives the operator
        assert os.getsid(worker) == worker != os.getsid(parent.pid)
        if os.path.exists(f"/proc/{worker}/autogroup"):
            assert group_nice(worker) == NO_BOARD_WAITS
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 10
        while _alive(worker) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _alive(worker), "the worker outlived its operator"
    finally:
        try:                                # the group: the forked child
            os.killpg(parent.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        if worker > 1 and _alive(worker):   # a worker left behind
            os.kill(worker, signal.SIGKILL)
