"""The names of the suites benchfarm can parse; plans and the CRD schema accept only these.

Kept equal to `benchfarm.suites.registry.names()` by a test (api may not import suites).
"""

SUITE_NAMES: list[str] = [
    "boot-time", "cyclictest", "dd", "fio", "hackbench", "iperf3", "mbw", "openssl", "shell",
    "stress-ng", "sysbench",
]
