"""What a board was measured under: the probe run on it around a suite, and what it printed
read back (the envelope's verdict on it is `core.readings.envelope`).

Why it exists: a figure taken on a board that throttled halfway, ran at a capped frequency or
had something else running is not the figure of the software under test (sbc-bench refuses such
results). The session records, around every suite step, what the board exposes (api.conditions)
and judges it against the envelope its device type and plan set.

The probe costs a suite step no console round trip of its own: each costs a prompt cycle, long
on a TCG board. Its shell functions are written to the board once a boot (`install`: one
command of many short lines, as an interactive busybox shell takes no line over 1024
characters); then
`wrap` makes ONE short command of a suite's: a marker line and a snapshot before, a sampler in
the background writing a snapshot every `intervalSeconds` to a file under /tmp (bounded: past
2 x MAX_DURING lines it keeps every other one and samples half as often; it ends by itself
when the wrapper's shell is gone, a timed-out suite's interrupted), the suite's command
(its exit code is the wrapper's), a marker and a snapshot after, a marker and the file. A
snapshot is one line of shell builtins only (`read`, `printf`, globs: no process started per
file), so it takes milliseconds even where each fork is slow. busybox sh compatible.

`unwrap` splits that output back into the suite's own output, exactly as the suite would have
printed it unwrapped (so its parser and the raw artifact are unchanged), and the snapshots. The
text is the tenant's board's: it is read in linear time and bounded memory, and a line that does
not parse is dropped, never an exception. The board's uptime is mapped to host wall time from
the host times the command was sent and returned; `busy` comes from /proc/stat deltas. Pure.
"""

from __future__ import annotations

import hashlib
import math
import secrets
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from benchfarm.api.conditions import MAX_DURING, CpuPolicy, Snapshot, ThermalZone
from benchfarm.api.devicetype import ConditionsSource

CONSOLE_LINE = 900          # a console line's characters, at most, as labgrid sends it
LINE = "@bfs"               # a snapshot line starts so
END = "|@end"               # and ends so: a line without it was cut and is dropped
MAX_LINE = 64 * 1024        # a longer line is no snapshot of ours
MAX_ENTRIES = 64            # policies, zones, cooling devices, counters kept per snapshot
MAX_NAME = 64
SAMPLES = "/tmp/bfc-samples"   # the during snapshots of the step running (one at a time a board)
# the short names the probe prints of the files it reads (`SHORT`), and what each becomes
SHORT = {"scaling_cur_freq": "cur", "scaling_min_freq": "min", "scaling_max_freq": "max",
         "scaling_governor": "gov", "cur_state": "cs", "stats/total_trans": "tt"}
_FILES = {"cur": "curKHz", "min": "minKHz", "max": "maxKHz", "gov": "governor"}


# -- on the board ---------------------------------------------------------------------------
def script(source: ConditionsSource) -> str:
    """The probe's shell functions, one short statement a line: `bfc_snap` prints one snapshot
    line (see `parse_line` for its fields), `bfc_sample` appends one to `$BFC_F` every
    intervalSeconds (halving them past 2 x MAX_DURING), `bfc_wrap NONCE` runs `$BFC_C` between
    them. Their variables are prefixed `bfc_`: a function's are the shell's."""
    root = source.root.rstrip("/")
    cpufreq = shlex.quote(f"{root}/devices/system/cpu/cpufreq")
    thermal = shlex.quote(f"{root}/class/thermal")
    throttle = [] if not source.throttleCommand else [
        f"( {source.throttleCommand} ) 2>/dev/null | while read -r bfc_n bfc_c _; do",
        "printf \"|x.%s=%s\" \"$bfc_n\" \"$bfc_c\"; done"]
    lines = [
        # a file's value under its short name ($4: `SHORT`), each snapshot printed a second
        # over a console
        "bfc_r() { [ -r \"$2/$3\" ] && read -r bfc_v 2>/dev/null < \"$2/$3\" &&",
        "printf \"|%s.%s.%s=%s\" \"$1\" \"${2##*/}\" \"$4\" \"$bfc_v\"; }",
        "bfc_snap() {",
        "printf \"@bfs\"",
        "read -r bfc_v _ 2>/dev/null < /proc/uptime && printf \"|up=%s\" \"$bfc_v\"",
        "read -r bfc_v 2>/dev/null < /proc/stat && printf \"|stat=%s\" \"$bfc_v\"",
        "read -r bfc_v _ 2>/dev/null < /proc/loadavg && printf \"|load=%s\" \"$bfc_v\"",
        "while read -r bfc_k bfc_v _; do [ \"$bfc_k\" = MemAvailable: ] &&",
        "{ printf \"|mem=%s\" \"$bfc_v\"; break; }; done 2>/dev/null < /proc/meminfo",
        f"for bfc_d in {cpufreq}/policy*; do [ -d \"$bfc_d\" ] || continue",
        "bfc_r p \"$bfc_d\" scaling_cur_freq cur; bfc_r p \"$bfc_d\" scaling_min_freq min",
        "bfc_r p \"$bfc_d\" scaling_max_freq max; bfc_r p \"$bfc_d\" scaling_governor gov; done",
        f"for bfc_d in {thermal}/thermal_zone*; do [ -d \"$bfc_d\" ] || continue",
        "bfc_r t \"$bfc_d\" type type; bfc_r t \"$bfc_d\" temp temp; done",
        f"for bfc_d in {thermal}/cooling_device*; do [ -d \"$bfc_d\" ] || continue",
        "bfc_r c \"$bfc_d\" cur_state cs; bfc_r c \"$bfc_d\" stats/total_trans tt; done",
        *throttle,
        "printf \"|@end\\n\"",
        "}",
        "bfc_sample() {",
        "n=0; t=0; k=1",
        f"while :; do sleep {source.intervalSeconds:g}; kill -0 $1 2>/dev/null || break",
        "t=$((t+1)); [ $((t%k)) = 0 ] || continue",
        "bfc_snap >> \"$BFC_F\"; n=$((n+1))",
        f"if [ $n -ge {2 * MAX_DURING} ]; then i=0",       # halve the file and the rate
        "while read -r l; do [ $((i%2)) = 1 ] && printf \"%s\\n\" \"$l\"; i=$((i+1))",
        "done < \"$BFC_F\" > \"$BFC_F.t\"",
        "while read -r l; do printf \"%s\\n\" \"$l\"; done < \"$BFC_F.t\" > \"$BFC_F\"",
        f"n={MAX_DURING}; k=$((k*2)); fi; done",
        "}",     # its file stays: the next step's (a builtin empties it, no process)
        "bfc_wrap() {",
        # the command sees no arguments; one file of samples a script, emptied by each step
        # (a builtin, where `rm` is a process: a fork costs a TCG board milliseconds)
        f"BFC_N=$1; shift; BFC_F={SAMPLES}; : > \"$BFC_F\"",
        "printf \"@@bfc-%s@@\\n\" \"$BFC_N-before\"; bfc_snap",
        "printf \"@@bfc-%s@@\\n\" \"$BFC_N-out\"",
        "( bfc_sample $$ ) </dev/null >/dev/null 2>&1 & BFC_S=$!",
        "( eval \"$BFC_C\" ); BFC_R=$?",
        "printf \"\\n@@bfc-%s@@\\n\" \"$BFC_N-after\"; bfc_snap",
        "kill $BFC_S 2>/dev/null; wait $BFC_S 2>/dev/null",
        "printf \"@@bfc-%s@@\\n\" \"$BFC_N-during\"",
        "while read -r l; do printf \"%s\\n\" \"$l\"; done < \"$BFC_F\" 2>/dev/null",
        "printf \"@@bfc-%s@@\\n\" \"$BFC_N-end\"",
        "exit $BFC_R",
        "}",
    ]
    return "\n".join(lines) + "\n"


def script_path(source: ConditionsSource) -> str:
    """Where the probe's functions live on the board: named by their digest, so a board never
    sources another version's."""
    return f"/tmp/bfc-{hashlib.sha256(script(source).encode()).hexdigest()[:12]}.sh"


def install(source: ConditionsSource) -> str:
    """The console command that writes the probe's functions to `script_path` on the board
    (once a boot: /tmp does not survive one) and then prints a snapshot (`read_probe` reads it):
    the reference the next snapshot's `busy` is counted from, or the first step's look. One
    command, its script a quoted argument of many lines: the shell reads each line on its own
    (an interactive busybox shell takes none over 1024 characters; each here is at most
    CONSOLE_LINE as labgrid quotes it), so the whole script costs one prompt cycle, not one a
    chunk (2,500 characters: 0.14-0.23 s on a TCG board against 0.41 s in four commands)."""
    path = shlex.quote(script_path(source))
    part = shlex.quote(script_path(source) + ".part")
    command = (f"printf '%s' {shlex.quote(script(source))} > {part} && mv -f {part} {path} "
               f"&& . {path} && bfc_snap")
    longest = max(len(line) for line in shlex.quote(command).splitlines())
    # the device type bounds its root and throttle command so that no line is longer
    assert longest <= CONSOLE_LINE, f"a line of the probe has {longest} characters"
    return command


def mark() -> str:
    """A snapshot line of the board's clock and CPU counters only, as a command's part (shell
    builtins: the provenance probes' round trip prints it before the probe is on the board), for
    `read_probe`: the first full snapshot's busy is counted from it."""
    return ("read -r bfc_v _ < /proc/uptime; printf '@bfs|up=%s' \"$bfc_v\"; "
            "read -r bfc_v < /proc/stat; printf '|stat=%s|@end\\n' \"$bfc_v\"")


def probe(source: ConditionsSource) -> str:
    """One snapshot, as a command of its own (waiting for the envelope before a step)."""
    path = shlex.quote(script_path(source))
    return f"[ -r {path} ] && . {path} && bfc_snap"


@dataclass(frozen=True)
class Markers:
    nonce: str

    def line(self, part: str) -> str:
        return f"@@bfc-{self.nonce}-{part}@@"


def wrap(command: str, source: ConditionsSource, nonce: str | None = None) -> tuple[str, Markers]:
    """The suite's `command` with the probe around it, as one short console command (the probe
    `install`ed before), and its markers (for `unwrap`). The command runs in a subshell through
    `eval`, so anything it is (a comment at its end, an `exit`) stays its own, and its exit
    code is the wrapper's. Without the probe on the board (a suite that emptied /tmp) the
    command runs as it is: no markers, no snapshots."""
    m = Markers(nonce or secrets.token_hex(6))
    path = shlex.quote(script_path(source))
    return (f"BFC_C={shlex.quote(command)}; if [ -r {path} ]; then . {path}; bfc_wrap {m.nonce}; "
            "else eval \"$BFC_C\"; fi"), m


# -- back on the host -----------------------------------------------------------------------
@dataclass
class Raw:
    """One snapshot line as the board printed it: its clock and CPU counters beside the rest."""

    uptime: float | None = None
    stat: tuple[int, ...] | None = None
    fields: dict[str, Any] = field(default_factory=dict)   # Snapshot's, but t and busy


@dataclass(frozen=True)
class Mark:
    """A snapshot's board clock and CPU counters: the reference of the next one's `busy`."""

    uptime: float
    stat: tuple[int, ...]


@dataclass
class Unwrapped:
    output: str                        # the suite's own output
    before: Snapshot | None = None
    during: list[Snapshot] = field(default_factory=list)
    after: Snapshot | None = None
    last: Mark | None = None           # the latest snapshot's, for the next step's busy


def _int(text: str) -> int | None:
    text = text.strip()
    if not 0 < len(text) <= 20 or not text.lstrip("-").isdigit():
        return None
    return int(text)


def _float(text: str) -> float | None:
    text = text.strip()
    if not 0 < len(text) <= 32:
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _name(text: str) -> str | None:
    text = text.strip()
    return text if 0 < len(text) <= MAX_NAME and text.isprintable() else None


def parse_line(line: str) -> Raw | None:
    """A snapshot line (`@bfs|up=..|stat=cpu ..|load=..|mem=..|p.policy0.cur=..
    |t.thermal_zone0.temp=..|c.cooling_device0.tt=..|x.name=count|@end`; a file under its own
    name, `scaling_cur_freq`, reads as under its short one, `SHORT`), or None when it is none
    (cut, too long): a field that does not parse is left out."""
    line = line.strip()
    if len(line) > MAX_LINE or not line.startswith(LINE) or not line.endswith(END):
        return None
    raw = Raw()
    cpufreq: dict[str, dict[str, Any]] = {}
    zones: dict[str, dict[str, Any]] = {}
    cooling: dict[str, int] = {}
    throttle: dict[str, int] = {}
    for item in line[len(LINE) + 1:-len(END)].split("|"):
        key, eq, value = item.partition("=")
        if not eq:
            continue
        if key == "up":
            up = _float(value.split(" ")[0])
            raw.uptime = up if up is not None and up >= 0 else None
        elif key == "stat":
            parts = value.split()
            counts = [_int(p) for p in parts[1:9]]
            if parts[:1] == ["cpu"] and len(counts) >= 4 and all(c is not None and c >= 0
                                                                 for c in counts):
                raw.stat = tuple(c for c in counts if c is not None)
        elif key == "load":
            raw.fields["load1"] = _float(value)
        elif key == "mem":
            raw.fields["memAvailableKiB"] = _int(value)
        elif key.startswith("x."):
            name, count = _name(key[2:]), _int(value)
            if name and count is not None and len(throttle) < MAX_ENTRIES:
                throttle[name] = count
        else:
            _device(key, value, cpufreq, zones, cooling, throttle)
    raw.fields.update(
        cpufreq={n: CpuPolicy(**v) for n, v in cpufreq.items()},
        thermal={n: ThermalZone(**v) for n, v in zones.items()},
        cooling=cooling, throttle=throttle)
    return raw


def _device(key: str, value: str, cpufreq: dict[str, dict[str, Any]],
            zones: dict[str, dict[str, Any]], cooling: dict[str, int],
            throttle: dict[str, int]) -> None:
    kind, _, rest = key.partition(".")
    device, _, file = rest.partition(".")
    file = SHORT.get(file, file)     # the files' own names read as their short ones
    name = _name(device)
    if name is None:
        return
    if kind == "p" and file in _FILES:
        entry = cpufreq.get(name)
        if entry is None and len(cpufreq) >= MAX_ENTRIES:
            return
        entry = cpufreq.setdefault(name, {})
        if file == "gov":
            entry["governor"] = _name(value)
        else:
            khz = _int(value)
            entry[_FILES[file]] = khz if khz is not None and khz >= 0 else None
    elif kind == "t" and file in ("type", "temp"):
        if name not in zones and len(zones) >= MAX_ENTRIES:
            return
        entry = zones.setdefault(name, {})
        if file == "type":
            entry["type"] = _name(value) or ""
        else:
            milli = _int(value)
            entry["tempC"] = None if milli is None else round(milli / 1000, 1)
    elif kind == "c" and file in ("cs", "tt"):
        count = _int(value)
        if count is None or count < 0:
            return
        table = cooling if file == "cs" else throttle
        if name in table or len(table) < MAX_ENTRIES:
            table[name] = count


def busy(before: Sequence[int], after: Sequence[int]) -> float | None:
    """The fraction of CPU time not idle between two /proc/stat `cpu` lines (user nice system
    idle iowait irq softirq steal); None when they do not follow each other."""
    if len(before) != len(after) or len(before) < 4:
        return None
    deltas = [b - a for a, b in zip(before, after, strict=True)]
    total = sum(deltas)
    if total <= 0 or any(d < 0 for d in deltas):
        return None
    idle = deltas[3] + (deltas[4] if len(deltas) > 4 else 0)
    return round(min(1.0, max(0.0, 1 - idle / total)), 4)


def snapshots(lines: Iterable[str], limit: int) -> list[Raw]:
    """The snapshot lines among `lines` (at most `limit` looked at, from the last)."""
    out = []
    for line in list(lines)[-limit:]:
        raw = parse_line(line)
        if raw is not None:
            out.append(raw)
    return out


def thin(items: Sequence[Any], most: int) -> list[Any]:
    """At most `most` items, evenly spread, first and last kept."""
    if len(items) <= most:
        return list(items)
    if most <= 1:
        return list(items[-most:]) if most else []
    return [items[round(i * (len(items) - 1) / (most - 1))] for i in range(most)]


def timed(raws: Sequence[Raw], sent: float, returned: float,
          previous: Mark | None = None) -> tuple[list[Snapshot | None], Mark | None]:
    """The snapshots of one command (one per raw line, None where the model refuses one), on
    the host's wall clock: the board's uptime offset by the middle of what the send and return
    times allow (the first snapshot came after `sent`, the last before `returned`); each
    snapshot's `busy` since the one before it (the first's since `previous`). A snapshot
    without an uptime is placed at `sent`; none lies outside the command's own time."""
    ups = [r.uptime for r in raws if r.uptime is not None]
    offset = ((sent - ups[0]) + (returned - ups[-1])) / 2 if ups else None
    out: list[Snapshot | None] = []
    last = previous
    for r in raws:
        t = r.uptime + offset if r.uptime is not None and offset is not None else sent
        t = min(max(t, sent), max(sent, returned))    # the board's clock ticks in 10 ms
        b = None
        if r.stat is not None and last is not None and (r.uptime is None
                                                         or r.uptime > last.uptime):
            b = busy(last.stat, r.stat)
        try:
            out.append(Snapshot(t=round(t, 3), busy=b, **r.fields))
        except ValueError:     # a field the model refuses: this snapshot is dropped
            out.append(None)
            continue
        if r.stat is not None and r.uptime is not None:
            last = Mark(r.uptime, r.stat)
    return out, last


def unwrap(text: str, markers: Markers, sent: float, returned: float,
           previous: Mark | None = None) -> Unwrapped:
    """The output of `wrap`'s command split back (see the module's docstring). Without the
    before marker (the wrapper never ran: a shell that did not parse it) the text is the
    suite's as it is; without the after marker (the suite timed out) the suite's output runs
    to the end and only the before snapshot is known."""
    start = text.find(markers.line("before"))
    out_at = text.find(markers.line("out") + "\n", start) if start >= 0 else -1
    if out_at < 0:
        return Unwrapped(text)
    head = text[start + len(markers.line("before")):out_at].splitlines()
    body_at = out_at + len(markers.line("out")) + 1
    after_at = text.rfind("\n" + markers.line("after"), body_at - 1)
    tail_after: list[str] = []
    tail_during: list[str] = []
    if after_at < 0:
        output = text[body_at:]
    else:
        output = text[body_at:after_at]
        if output.endswith("\n"):  # the suite's last line break: unwrapped, labgrid drops it
            output = output[:-1]
        rest_at = after_at + 1 + len(markers.line("after"))
        during_at = text.find(markers.line("during"), rest_at)
        during_at = len(text) if during_at < 0 else during_at
        end_at = text.find(markers.line("end"), during_at)
        tail_after = text[rest_at:during_at].splitlines()
        tail_during = text[during_at + len(markers.line("during")):
                           end_at if end_at >= 0 else len(text)].splitlines()
    before = snapshots(head, 4)[-1:]
    after = snapshots(tail_after, 8)[-1:]
    during = snapshots(tail_during, 4 * MAX_DURING)
    ups = [r.uptime for r in before + after if r.uptime is not None]
    if len(ups) == 2:           # a stale line (another step's file) is not this step's
        during = [r for r in during if r.uptime is not None and ups[0] <= r.uptime <= ups[1]]
    during.sort(key=lambda r: r.uptime or 0.0)
    during = thin(during, MAX_DURING)
    snaps, last = timed(before + during + after, sent, returned, previous)
    middle = snaps[len(before):len(before) + len(during)]
    return Unwrapped(output, snaps[0] if before else None, [s for s in middle if s is not None],
                     snaps[-1] if after else None, last)


def read_probe(text: str, sent: float, returned: float,
               previous: Mark | None = None) -> tuple[Snapshot | None, Mark | None]:
    """The one snapshot `probe` printed (None: nothing that parses), and its mark."""
    raws = snapshots(text.splitlines()[-8:], 8)[-1:]
    snaps, last = timed(raws, sent, returned, previous)
    return (snaps[0] if snaps else None), last
