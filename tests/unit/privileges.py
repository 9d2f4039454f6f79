"""What this test process may do to CPU priorities (tests of benchfarm.cpu and the lab's)."""

from __future__ import annotations


def may_raise_priorities() -> bool:
    """CAP_SYS_NICE (bit 23) among this process's effective capabilities."""
    with open("/proc/self/status") as f:
        caps = next(line.split()[1] for line in f if line.startswith("CapEff:"))
    return bool(int(caps, 16) >> 23 & 1)
