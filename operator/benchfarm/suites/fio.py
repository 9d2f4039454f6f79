"""fio --output-format=json: per job and direction, IOPS, bandwidth (KiB/s) and mean latency; and
in the guides' storage layout, throughput (MB/s) and CPU load (%) by buffer size:
`fio-<job>-<bs>-<direction>-throughput` and `-cpu-load`. The job's name says which guide table the
figures belong to (`--name=emmc-ext4-fio-1g`, TI's "EMMC EXT4 FIO 1G"); bs is the job's `bs` as
written (fio's default 4k when not given). CPU load is the job's (user + system), so it is given
only for a job that did one direction."""

from __future__ import annotations

from typing import Any

from benchfarm.errors import ParseError
from benchfarm.suites.base import Metric, json_object

SUITE = "fio"


def parse(text: str, params: dict[str, str] | None = None) -> list[Metric]:
    data = json_object(text, SUITE, "run fio with --output-format=json")
    try:
        return _metrics(data)
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
        raise ParseError(SUITE, f"JSON of another shape than fio's ({type(exc).__name__}: "
                                f"{str(exc)[:120]})") from exc


def _metrics(data: dict[str, Any]) -> list[Metric]:
    out: list[Metric] = []
    for job in data.get("jobs", []):
        name = job.get("jobname", "job")
        options = {**data.get("global options", {}), **job.get("job options", {})}
        bs = str(options.get("bs", "4k")).lower()
        directions = [d for d in ("read", "write") if (job.get(d) or {}).get("io_bytes")]
        for direction in directions:
            d = job[direction]
            labels = {"job": name, "direction": direction, "bs": bs}
            shaped = f"fio-{name}-{bs}-{direction}"
            out.append(Metric(f"{shaped}-throughput", round(d["bw_bytes"] / 1e6, 2), "MB/s", True,
                              labels))
            if len(directions) == 1:
                out.append(Metric(f"{shaped}-cpu-load", round(job["usr_cpu"] + job["sys_cpu"], 2),
                                  "%", False, labels))
            out.append(Metric(f"fio-{name}-{direction}-iops", round(d["iops"], 2), "IOPS", True, labels))
            out.append(Metric(f"fio-{name}-{direction}-bw", d["bw"], "KiB/s", True, labels))
            if "clat_ns" in d:
                out.append(Metric(f"fio-{name}-{direction}-clat-mean",
                                  round(d["clat_ns"]["mean"] / 1000, 2), "us", False, labels))
    if not out:
        raise ParseError(SUITE, "JSON has no job with read or write I/O")
    return out
