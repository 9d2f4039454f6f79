"""One forkserver for the session server and every session it forks (`budgeted.share`): a
session's parse does not start a forkserver of its own, and one that outlived its forkserver
starts its own again. Each scenario runs in a process of its own (forked from a fresh
interpreter), as the session server and its sessions are; a session whose server exited (and
with it the forkserver's socket, in the server's temporary folder) starts its own too."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

SCENARIO = textwrap.dedent("""
    import json, os, sys, time
    from multiprocessing import forkserver
    from benchfarm import budgeted

    def budget():
        return budgeted.Budget(5, 512)

    def in_grandchild(fn):
        # as the session server forks a session: twice, the second a grandchild of the server
        r, w = os.pipe()
        if os.fork() == 0:
            if os.fork() == 0:
                os.close(r)
                try:
                    out = fn()
                except Exception as exc:
                    out = {"error": f"{type(exc).__name__}: {exc}"}
                os.write(w, json.dumps(out).encode())
                os._exit(0)
            os._exit(0)
        os.close(w)
        with os.fdopen(r) as f:
            return json.loads(f.read() or "{}")

    def session():
        before = forkserver._forkserver._forkserver_pid
        value = budgeted.call(abs, -42, budget=budget(), preload=PRELOAD)
        return {"value": value, "before": before,
                "after": forkserver._forkserver._forkserver_pid}

    PRELOAD = ("benchfarm.budgeted",)
    budgeted.share(PRELOAD)
    server = forkserver._forkserver._forkserver_pid
    shared = in_grandchild(session)
    address = forkserver._forkserver._forkserver_address
    folder = os.path.dirname(address)
    os.rename(folder, folder + ".away")          # the parent exited: its temporary folder went
    unlinked = in_grandchild(session)
    os.rename(folder + ".away", folder)
    os.kill(server, 9)                       # the server's forkserver ends
    while budgeted._parent_of(server) is not None:
        time.sleep(0.05)
    alone = in_grandchild(session)
    print(json.dumps({"server": server, "shared": shared, "unlinked": unlinked, "alone": alone}))
""")


def test_a_forked_session_parses_in_the_servers_forkserver_and_starts_its_own_once_it_ended():
    out = subprocess.run([sys.executable, "-c", SCENARIO], capture_output=True, text=True,
                         timeout=120, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    shared, alone = got["shared"], got["alone"]
    assert shared == {"value": 42, "before": got["server"], "after": got["server"]}, got
    unlinked = got["unlinked"]
    assert unlinked["value"] == 42 and unlinked["after"] not in (None, got["server"]), got
    assert alone["value"] == 42 and alone["before"] == got["server"], got
    assert alone["after"] not in (None, got["server"]), got       # its own, started once needed
