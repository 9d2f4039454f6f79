"""One command with a huge output, run through the real labgrid drivers; prints what it measured.

Run as its own process (its peak RSS is the measure): `python bigoutput.py <port> <bytes> <log>`
connects labgrid's NetworkSerialPort + SerialDriver + ShellDriver to a console on 127.0.0.1:<port>
(tests/stack/ptyboard.py), hooks benchfarm's strategy on it to stream the console to the serial
log file <log>, runs a command printing <bytes> with `lab.board.run_bounded`, and prints a JSON
line: VmHWM before and after, seconds, the output's first and last lines and its cut line.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from labgrid import Target
from labgrid.driver import ExternalPowerDriver, SerialDriver, ShellDriver
from labgrid.resource import NetworkSerialPort

from benchfarm.api.devicetype import BootSpec
from benchfarm.lab.board import OUTPUT_LIMIT, SerialLog, run_bounded
from benchfarm.lab.strategy import BenchfarmStrategy


def vm_hwm() -> int:
    """This process's peak resident memory so far, in bytes."""
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def main(port: int, size: int, log_path: str) -> None:
    target = Target("fast-board")
    NetworkSerialPort(target, name=None, host="127.0.0.1", port=port, speed=115200,
                      protocol="raw")
    ExternalPowerDriver(target, name=None, cmd_on="true", cmd_off="true")
    SerialDriver(target, name=None)
    ShellDriver(target, name=None, prompt=r"board\$ ", login_prompt="login: ", username="root",
                login_timeout=30)
    strategy = BenchfarmStrategy(target, name=None)
    serial_log = SerialLog(Path(log_path), limit=2 * size + (1 << 20))
    strategy.prepare(BootSpec(), serial_log.add)
    target.activate(strategy.console)
    strategy.activate_shell()
    run_bounded(strategy.shell, "true", 30, OUTPUT_LIMIT)       # warm: everything imported
    before = vm_hwm()
    start = time.monotonic()
    command = f"echo FIRST-LINE; yes 0123456789abcdefghijklmnopqrstuvwxyz | head -c {size}; " \
              f"echo; echo LAST-LINE"
    output, code = run_bounded(strategy.shell, command, 3600, OUTPUT_LIMIT)
    seconds = time.monotonic() - start
    after = vm_hwm()
    serial_log.close()
    lines = output.split("\n")
    print(json.dumps({"before": before, "after": after, "seconds": round(seconds, 2),
                      "exit": code, "chars": len(output), "first": lines[0], "last": lines[-1],
                      "cut": [line for line in lines if line.startswith("[benchfarm:")],
                      "log": serial_log.size}))
    target.deactivate_all_drivers()


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3])
