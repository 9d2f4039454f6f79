"""The CPU priority of benchfarm's own threads: lowered in full for work no board waits for, and
the operator's scheduling thread first in line where the host lets it.

A board session past its board (statistics, plots, reports, uploads: a few hundred ms of CPU) and
the operator's change-point worker (seconds per series) yield the CPU to what a board or a
scheduling round waits for. Linux has two views of a process's priority, and both are lowered:

- a nice value per thread: every thread now, and those started later inherit their creator's;
- where the kernel shares the CPU between sessions (autogroup: Debian's kernels, outside a cpu
  cgroup of their own) a session's threads share one weight against every other session's,
  whatever their nice values. Board sessions call setsid, so each would weigh as much as the
  whole operator. A process alone in its session lowers its group's nice too
  (`/proc/self/autogroup`; anyone may lower it; without CAP_SYS_ADMIN the kernel takes one
  change per 100 ms host-wide, so a refused change is tried again, a few times). A process in
  a session whose leader lives (a shell's) leaves that group alone.

Never raised back: without privileges it could not be.

A scheduling round is a few ms of CPU a run or a freed board waits for; behind two dozen busy
sessions it waited for a CPU ten times that long. Where the host allows it (CAP_SYS_NICE, an
RLIMIT_RTPRIO) the operator's owner thread (`operator.state.owner`: its rounds and the events between them)
runs in the real-time round-robin class at its lowest priority (`first_in_line`): it takes a CPU
the moment it wakes. Its work per wake is short and bounded, and Linux's real-time throttling
keeps 5 % of every CPU for the rest whatever it does. Left out with the other CPU tunings, a full
bench's rounds waited up to 128 ms for a CPU (benchmarks/RESULTS.md, "The tunings measured with
the owner thread").
"""

from __future__ import annotations

import os
import time

AUTOGROUP = "/proc/self/autogroup"
NO_BOARD_WAITS = 10      # the nice value of work no board waits for (sessions past their board,
                         # the change-point worker); their session groups' too


def lower(nice: int) -> None:
    """This process at nice `nice` or lower priority, every thread and its session's group."""
    try:
        tids = [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:          # no /proc: the whole process, as POSIX has it
        tids = [0]
    for tid in tids:
        try:
            if os.getpriority(os.PRIO_PROCESS, tid) < nice:
                os.setpriority(os.PRIO_PROCESS, tid, nice)
        except OSError:      # the thread ended meanwhile
            continue
    if own_session():
        _lower_group(nice)


def first_in_line(priority: int) -> bool:
    """This thread (only it) in the real-time round-robin class at `priority` (1 is the lowest),
    ahead of every time-shared thread of the host; the threads and processes it starts are
    time-shared again (SCHED_RESET_ON_FORK). False where the host does not allow it (no
    CAP_SYS_NICE, or a cpu cgroup without a real-time budget): the thread stays as it was."""
    try:
        os.sched_setscheduler(0, os.SCHED_RR | os.SCHED_RESET_ON_FORK, os.sched_param(priority))
    except OSError:
        return False
    return True


def own_session() -> bool:
    """Whether this process's session is its own: it leads it, or its leader is gone (the
    session server's first child calls setsid, forks the session and exits)."""
    sid = os.getsid(0)
    return sid == os.getpid() or not os.path.exists(f"/proc/{sid}")


def group_nice(pid: int | None = None) -> int | None:
    """The nice of the session group of process `pid` (this one by default), or None where it is
    in no such group: a kernel without autogroup, or a session that never left the host's first
    (pid 1's, as in a container whose init starts everything; the kernel shows nothing for it and
    refuses to change its weight)."""
    try:
        with open(f"/proc/{pid}/autogroup" if pid else AUTOGROUP) as f:
            shown = f.read().split()                    # "/autogroup-17803 nice 0"
    except OSError:
        return None
    return int(shown[-1]) if shown else None


def _lower_group(nice: int, tries: int = 5) -> None:
    for attempt in range(tries):
        now = group_nice()
        if now is None or now >= nice:
            return
        try:
            with open(AUTOGROUP, "w") as f:
                f.write(str(nice))
            return
        except BlockingIOError:     # EAGAIN: some group changed within the last 100 ms
            time.sleep(0.1 * (attempt + 1))
        except OSError:             # the group went away with its session
            return
