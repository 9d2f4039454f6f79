"""The names of the suites benchfarm can parse; plans and the CRD schema accept only these.

Kept equal to `benchfarm.suites.registry.names()` by a test (api may not import suites).
"""

SUITE_NAMES: list[str] = [
    "7zip", "alsa", "boot-time", "console-timing", "coremark", "coremark-pro", "cyclictest", "dd",
    "dhrystone", "dmatest", "fio", "fps", "glmark2", "hackbench", "iperf3", "linpack", "lmbench",
    "mbw", "multibench", "nbench", "ne10", "netperf", "openssl", "shell", "stream", "stress-ng",
    "sysbench", "whetstone", "low-power",
]

# Suites the board session runs itself (no command output to parse).
SESSION_SUITES: set[str] = {"low-power"}
# Suites that need a GPU on the board.
GPU_SUITES: set[str] = {"glmark2", "fps"}
