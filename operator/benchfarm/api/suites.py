"""The names of the suites benchfarm can parse; plans and the CRD schema accept only these."""

SUITE_NAMES: list[str] = [
    "lmbench", "dhrystone", "whetstone", "linpack", "nbench", "stream", "coremark", "coremark-pro",
    "multibench", "cyclictest", "hackbench", "openssl", "fio", "dd", "iperf3", "netperf",
    "stress-ng", "sysbench", "mbw", "7zip", "glmark2", "fps", "alsa", "boot-time", "console-timing",
    "shell",
]
