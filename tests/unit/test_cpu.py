"""benchfarm.cpu: a process that yields the CPU does so in every thread and, where the kernel
shares the CPU between sessions (autogroup), in its own session's group and no one else's. In
child processes: a nice value cannot be raised back without privileges."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from benchfarm import cpu
from tests.unit.privileges import may_raise_priorities


def _in_a_child(code: str, own_session: bool = False) -> list[int]:
    """Run `code` in a fresh Python with this one's import path (in a session of its own, as a
    board session is, with `own_session`); the integers it printed."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         check=True, start_new_session=own_session).stdout
    return [int(word) for word in out.split()]


def test_lowered_means_every_thread_and_those_started_later_and_never_raised():
    """Lowered to nice 10 (a board session past its board), a process runs at nice 10, all its
    threads, and threads it starts later too; one already lower (nice 15) stays there. In a child process: a nice value
    cannot be lowered back without privileges."""
    code = """
import os, threading
from benchfarm import cpu
def nice(tid):
    return os.getpriority(os.PRIO_PROCESS, tid)
low_set, done = threading.Event(), threading.Event()
low = {}
def lowered():
    low['tid'] = threading.get_native_id()
    os.setpriority(os.PRIO_PROCESS, low['tid'], 15)
    low_set.set()
    done.wait()
t = threading.Thread(target=lowered); t.start(); low_set.wait()
before = {int(x): nice(int(x)) for x in os.listdir('/proc/self/task')}
cpu.lower(10)
after = {int(x): nice(int(x)) for x in os.listdir('/proc/self/task')}
later = []
t2 = threading.Thread(target=lambda: later.append(nice(threading.get_native_id()))); t2.start(); t2.join()
done.set(); t.join()
print(before[low['tid']], after[low['tid']], min(after.values()), len(after), later[0])
"""
    low_before, low_after, least, threads, started_later = _in_a_child(code)
    assert (low_before, low_after) == (15, 15)
    assert least == 10 and threads == 2
    assert started_later == 10


NOT_IN_A_GROUP = -99
AUTOGROUP = f"""
from benchfarm.cpu import group_nice as _group_nice
def group_nice():
    nice = _group_nice()
    return {NOT_IN_A_GROUP} if nice is None else nice
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/autogroup"), reason="no autogroup here")
def test_a_session_alone_in_its_session_lowers_its_autogroup_and_no_one_elses():
    """Where the kernel shares the CPU between sessions (autogroup), each board session (which
    called setsid) weighs as much as the operator whatever its threads' nice: past its board it
    lowers its own group to nice 10 (`cpu.lower`), as the session's leader or, as the session server forks it,
    the child of a leader that has exited. A process in a session whose leader lives (its
    shell's, pytest's) leaves that group alone."""
    leader = _in_a_child(AUTOGROUP + """
from benchfarm import cpu
before = group_nice()
cpu.lower(10)
print(before, group_nice())
""", own_session=True)
    assert leader == [0, 10]
    forked = _in_a_child(AUTOGROUP + """
import os, time
from benchfarm import cpu
r, w = os.pipe()
first = os.fork()
if first == 0:                  # the session server's way: setsid, fork, the leader exits
    os.setsid()
    if os.fork():
        os._exit(0)
    while os.path.exists(f"/proc/{os.getsid(0)}"):      # until the server has reaped it
        time.sleep(0.01)
    before = group_nice()
    cpu.lower(10)
    os.write(w, f"{before} {group_nice()}".encode())
    os._exit(0)
os.waitpid(first, 0)
os.close(w)
print(os.read(r, 100).decode())
""")
    assert forked == [0, 10]
    mine = cpu.group_nice()         # None where pytest runs in the host's first session (CI's)
    follower = _in_a_child(AUTOGROUP + """
from benchfarm import cpu
cpu.lower(10)
print(group_nice())
""")
    assert follower == [NOT_IN_A_GROUP if mine is None else mine]


def test_a_process_in_no_session_group_reads_none_and_is_left_as_it_is(tmp_path, monkeypatch):
    """A process in the host's first session (pid 1's: CI in a container) is in no session
    group: the kernel shows an empty file and refuses to reweigh the root group. Its group reads
    as None, and lowering it is not tried."""
    shown = tmp_path / "autogroup"
    shown.write_text("")
    monkeypatch.setattr(cpu, "AUTOGROUP", str(shown))
    assert cpu.group_nice() is None
    cpu._lower_group(10)
    assert shown.read_text() == ""
    shown.write_text("/autogroup-17803 nice 0\n")
    assert cpu.group_nice() == 0
    cpu._lower_group(10)
    assert shown.read_text() == "10"


FIRST_IN_LINE = """
import os, threading
from benchfarm import cpu
out = {}
def scheduler():
    out['asked'] = cpu.first_in_line(1)
    out['it'] = os.sched_getscheduler(0) & ~os.SCHED_RESET_ON_FORK
    later = []
    t = threading.Thread(target=lambda: later.append(os.sched_getscheduler(0)))
    t.start(); t.join()
    out['its_thread'] = later[0]
    child = os.fork()
    if child == 0:
        os._exit(os.sched_getscheduler(0))
    out['its_child'] = os.waitstatus_to_exitcode(os.waitpid(child, 0)[1])
t = threading.Thread(target=scheduler); t.start(); t.join()
print(int(out['asked']), out['it'], out['its_thread'], out['its_child'], os.sched_getscheduler(0))
"""


def test_first_in_line_is_one_thread_in_the_real_time_class_and_none_it_starts():
    """The operator's scheduling thread, first in line for a CPU (`cpu.first_in_line`): it alone
    runs in the real-time round-robin class; a thread it starts and a process it forks are
    time-shared, and so is the rest of its process. Where the host does not allow it, it says
    so and stays time-shared."""
    asked, it, its_thread, its_child, rest = _in_a_child(FIRST_IN_LINE)
    other = os.SCHED_OTHER
    assert (its_thread, its_child, rest) == (other, other, other)
    assert it == (os.SCHED_RR if asked else other)
    if may_raise_priorities() and not asked:
        pytest.skip("CAP_SYS_NICE, but this cpu cgroup has no real-time budget")


def test_first_in_line_is_refused_without_the_privilege():
    """Without CAP_SYS_NICE (and without a real-time rlimit) the thread stays time-shared."""
    if not shutil.which("setpriv") or os.geteuid() != 0:
        pytest.skip("needs root and util-linux's setpriv to drop a capability")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run(["setpriv", "--bounding-set", "-sys_nice", "--inh-caps", "-sys_nice",
                          sys.executable, "-c", FIRST_IN_LINE], capture_output=True, text=True,
                         env=env, check=True).stdout
    assert [int(w) for w in out.split()] == [0, os.SCHED_OTHER, os.SCHED_OTHER, os.SCHED_OTHER,
                                             os.SCHED_OTHER]
