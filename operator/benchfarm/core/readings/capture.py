"""A board's output held in bounded memory: its head and its tail, and how much was cut between.

A board prints as much as it likes: a soak's console over hours, a suite's verbose log at the
speed of a USB gadget console. The session pod has a few hundred MiB; the serial log (a file)
keeps every byte, so what the session holds in memory can be bounded: the first and the last
bytes of a command's output (where suites print their configuration and their results), with a
line saying how many bytes were cut from the middle. `ShellOutput` finds the end of a command in
the console stream the way labgrid's ShellDriver marks it, searching a bounded window instead of
an ever-growing buffer, and reads labgrid's protocol (its markers, the exit code, the prompt)
through the kernel's log lines, which the kernel prints on the console between any two bytes.
"""

from __future__ import annotations

import re
from collections import deque

from benchfarm.api.outcomes import BoardFaultKind
from benchfarm.errors import BoardFault

SERIAL_LOG_HAS_THEM = "the serial log has them all"
# labgrid's (labgrid.util.helper.re_vt100): the ShellDriver strips these from a command's output
VT100 = re.compile(r"(\x1b\[|\x9b)[^@-_a-z]*[@-_a-z]|\x1b[@-_a-z]")
# A line of the kernel's log on the console (`printk.time=1`: its stamp first, a line break
# last). The kernel's console driver writes it between any two bytes the shell prints — into
# labgrid's markers, between the end marker, the exit code and the prompt ("random: crng init
# done", "hrtimer: interrupt took …" on a loaded host): the protocol is read through such lines,
# or one of them ends a command as a timeout. A command's own output keeps them (dmesg-reading
# suites parse them). A line without a stamp cannot be told from the shell's.
KERNEL_LINE = rb"\[\s*\d+\.\d+\] [^\n]*\n"
KERNEL_LINES = re.compile(KERNEL_LINE)
KERNEL_TEXT_LINES = re.compile(KERNEL_LINE.decode())   # the same, in decoded text (boot logs)
KERNEL_LINE_MAX = 1024      # printk's longest line (LOG_LINE_MAX), its stamp included


def through_kernel_lines(literal: bytes) -> bytes:
    """A regex of `literal` with any kernel log lines between its bytes."""
    return (b"(?:" + KERNEL_LINE + b")*").join(re.escape(bytes([c])) for c in literal)


class HeadTail:
    """The first `head` and the last `limit - head` bytes of a stream; memory stays below
    `limit` plus one chunk whatever the stream's length."""

    def __init__(self, limit: int, head: int | None = None,
                 what: str = "output", note: str = SERIAL_LOG_HAS_THEM) -> None:
        if limit < 2:
            raise ValueError(f"a head+tail capture needs a limit of at least 2 bytes, not {limit}")
        self.head_limit = limit // 2 if head is None else min(head, limit)
        self.tail_limit = limit - self.head_limit
        self.what, self.note = what, note
        self.head = bytearray()
        self.tail: deque[bytes] = deque()
        self.tail_size = 0
        self.total = 0

    @property
    def cut(self) -> int:
        return self.total - len(self.head) - self.tail_size

    def add(self, data: bytes) -> None:
        self.total += len(data)
        room = self.head_limit - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if not data or not self.tail_limit:
            return
        if len(data) >= self.tail_limit:
            self.tail.clear()
            self.tail.append(bytes(data[-self.tail_limit:]))
            self.tail_size = self.tail_limit
            return
        self.tail.append(bytes(data))
        self.tail_size += len(data)
        while self.tail_size - len(self.tail[0]) >= self.tail_limit:
            self.tail_size -= len(self.tail.popleft())
        over = self.tail_size - self.tail_limit
        if over > 0:
            self.tail[0] = self.tail[0][over:]
            self.tail_size -= over

    def cut_line(self) -> bytes:
        return (f"[benchfarm: {self.cut} bytes cut from the middle of this {self.what}; "
                f"{self.note}]").encode()

    def value(self, newline: bytes = b"\n") -> bytes:
        """Head and tail; between them, when anything was cut, a line that says so."""
        cut = [newline, self.cut_line(), newline] if self.cut else []
        return b"".join([self.head, *cut, *self.tail])

    def since(self, offset: int) -> bytes:
        """What came from stream offset `offset` on, as far as it is kept (a cut part is the
        cut line)."""
        if offset < len(self.head):
            return self.value()[offset:]
        if offset >= self.total - self.tail_size:
            return b"".join(self.tail)[offset - (self.total - self.tail_size):]
        return self.cut_line() + b"\n" + b"".join(self.tail)


def shell_text(raw: bytes) -> str:
    """A command's output as labgrid's ShellDriver.run gives it (VT100 codes removed, CRLF
    lines, the last line break dropped), joined with newlines. Bytes that are not UTF-8 (a cut
    through a character, a binary dump) are replaced, not an error."""
    end = len(raw) - 2 if raw.endswith(b"\r\n") else len(raw)
    text = str(memoryview(raw)[:end], "utf-8", "replace")
    return VT100.sub("", text).replace("\r\n", "\n")


class ShellOutput:
    """One command's output on a console, between labgrid's ShellDriver markers.

    The ShellDriver's `run` shell function prints MARKER, the command's output, then
    `MARKER <exit code>` and the prompt (`marker(.*)marker\\s+(\\d+)\\s+prompt`). Fed the
    console's bytes in order, this drops the echoed command line, keeps the output in a
    `HeadTail`, and searches for the end in a window of the last bytes only."""

    AFTER_MARKER = 64 * 1024    # the exit code and the prompt follow the end marker closely

    def __init__(self, marker: str, prompt: str, limit: int) -> None:
        self.marker = re.compile(through_kernel_lines(marker.encode()))
        # bytes held back from the output: a marker's beginning, a kernel line inside it
        self.hold = len(marker) - 1 + KERNEL_LINE_MAX
        self.end = re.compile(rb"\s+(\d+)\s+" + prompt.encode(), re.DOTALL)
        self.output = HeadTail(limit)
        self.started = False
        self.exit_code: int | None = None
        self._window = b""      # bytes not yet known to be output (a marker may begin there)
        self._ended = False

    @property
    def done(self) -> bool:
        return self.exit_code is not None

    def feed(self, data: bytes) -> None:
        if self.done:
            return
        window = self._window + data
        if self._ended:
            self._finish(window)
            return
        found = self.marker.search(window)
        if found is None:
            if self.started and len(window) > self.hold:
                self.output.add(window[:len(window) - self.hold])
            self._window = window[-self.hold:]
            return
        if not self.started:    # the first marker: the output begins after it
            self.started = True
            self._window = b""
            self.feed(window[found.end():])
            return
        self.output.add(window[:found.start()])
        self._ended = True
        self._window = b""
        self._finish(window[found.end():])

    def _finish(self, after: bytes) -> None:
        match = self.end.match(KERNEL_LINES.sub(b"", after))
        if match:
            self.exit_code = int(match.group(1))
            self._window = b""
            return
        if len(after) > self.AFTER_MARKER:
            raise BoardFault(f"the shell printed labgrid's end marker but no exit code and "
                             f"prompt after it: {after[:80]!r}", reason=BoardFaultKind.shell_failed)
        self._window = after

    def text(self) -> str:
        """The output as a ShellDriver gives it; once: the capture's memory is handed over."""
        raw = self.output.value(b"\r\n")
        self.output = HeadTail(2)
        return shell_text(raw)
