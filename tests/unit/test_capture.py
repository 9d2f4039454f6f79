"""A board's output in bounded memory: head + tail + the cut said (core.readings.capture, SerialLog)."""

from __future__ import annotations

import os

import pytest

from benchfarm.core.readings.capture import HeadTail, ShellOutput, shell_text
from benchfarm.errors import BoardFault
from benchfarm.lab.board import SerialLog


def _stream(total: int) -> bytes:
    return bytes(i % 251 for i in range(total))


@pytest.mark.parametrize("chunk", [1, 7, 100, 1000, 5000])
def test_head_tail_keeps_the_first_and_last_bytes_and_counts_the_cut(chunk):
    data = _stream(20_000)
    cap = HeadTail(1000, head=300)
    peak = 0
    for i in range(0, len(data), chunk):
        cap.add(data[i:i + chunk])
        peak = max(peak, len(cap.head) + cap.tail_size)
    assert peak <= 1000
    assert cap.total == 20_000 and cap.cut == 19_000
    assert bytes(cap.head) == data[:300]
    assert b"".join(cap.tail) == data[-700:]
    value = cap.value()
    assert value.startswith(data[:300] + b"\n[benchfarm: 19000 bytes cut from the middle of this "
                            b"output; the serial log has them all]\n")
    assert value.endswith(data[-700:])


def test_head_tail_of_a_short_stream_is_the_stream_with_no_cut_line():
    cap = HeadTail(1000)
    for part in (b"hello ", b"world\n"):
        cap.add(part)
    assert cap.value() == b"hello world\n" and cap.cut == 0


def test_head_tail_since_an_offset():
    cap = HeadTail(10, head=4, what="console log", note="only the ends are kept")
    cap.add(b"0123456789abcdefghij")                # head 0123, tail efghij, 10 cut
    assert cap.since(2) == b"23\n[benchfarm: 10 bytes cut from the middle of this console log; " \
                           b"only the ends are kept]\nefghij"
    assert cap.since(15) == b"fghij"
    assert cap.since(8).startswith(b"[benchfarm: 10 bytes cut") and cap.since(8).endswith(b"\nefghij")


def _console(marker: str, output: bytes, code: int = 0) -> bytes:
    echo = f"MARKER='{marker[:4]}''{marker[4:]}' run 'some command'\r\n".encode()
    return echo + marker.encode() + output + f"{marker} {code}\r\n".encode() + b"root@board:~# "


@pytest.mark.parametrize("chunk", [1, 3, 10, 4096])
def test_shell_output_finds_labgrids_markers_across_any_chunking(chunk):
    marker = "ABCDEFGHIJ"
    out = b"".join(b"line %d\r\n" % i for i in range(200))
    stream = _console(marker, out, 3)
    cap = ShellOutput(marker, r"root@\w+:[^ ]+ ", limit=1 << 20)
    for i in range(0, len(stream), chunk):
        assert not cap.done
        cap.feed(stream[i:i + chunk])
    assert cap.done and cap.exit_code == 3
    assert cap.text() == "\n".join(f"line {i}" for i in range(200))


KERNEL = b"[   15.020089] random: crng init done\r\n"


def _with_kernel_line(stream: bytes, at: bytes, offset: int) -> bytes:
    i = stream.index(at) + offset
    return stream[:i] + KERNEL + stream[i:]


@pytest.mark.parametrize("where", ["in the start marker", "in the end marker",
                                   "after the end marker", "after the exit code",
                                   "in the prompt"])
@pytest.mark.parametrize("chunk", [1, 5, 4096])
def test_shell_output_reads_the_protocol_through_the_kernels_log_lines(where, chunk):
    """The kernel prints its log on the console between any two bytes of the shell's (seen on
    the virtual boards: crng, link up, hrtimer, suspend entry): the command still ends, with
    its exit code and its own output."""
    marker = "ABCDEFGHIJ"
    stream = _console(marker, b"Time: 2.000\r\n", 0)
    after_output = stream.index(b"Time: 2.000\r\n") + len(b"Time: 2.000\r\n")
    stream = {
        "in the start marker": lambda: _with_kernel_line(stream, b"\r\nABCD", 6),
        "in the end marker": lambda: stream[:after_output + 3] + KERNEL + stream[after_output + 3:],
        "after the end marker": lambda: stream[:after_output + 10] + KERNEL
        + stream[after_output + 10:],
        "after the exit code": lambda: _with_kernel_line(stream, b" 0\r\n", 4),
        "in the prompt": lambda: _with_kernel_line(stream, b"root@", 5),
    }[where]()
    cap = ShellOutput(marker, r"root@\w+:[^ ]+ ", limit=1 << 20)
    for i in range(0, len(stream), chunk):
        cap.feed(stream[i:i + chunk])
    assert cap.done and cap.exit_code == 0
    assert cap.text() == "Time: 2.000"


def test_a_kernel_line_in_a_commands_output_is_its_output():
    """dmesg-reading suites (dmatest) parse the kernel's lines: the output keeps them."""
    marker = "ABCDEFGHIJ"
    cap = ShellOutput(marker, r"\$ ", limit=1 << 20)
    cap.feed(_console(marker, b"Doing AES: " + KERNEL + b"54137 in 1s\r\n").replace(
        b"root@board:~# ", b"$ "))
    assert cap.exit_code == 0
    assert cap.text() == "Doing AES: [   15.020089] random: crng init done\n54137 in 1s"


def test_shell_output_bounds_a_huge_output_and_says_what_was_cut():
    marker = "QWERTYUIOP"
    cap = ShellOutput(marker, r"\$ ", limit=4096)
    cap.feed(b"echo\r\n" + marker.encode() + b"first line\r\n")
    for _ in range(1000):
        cap.feed(b"x" * 1000 + b"\r\n")
    cap.feed(b"last line\r\n" + marker.encode() + b" 0\r\n$ ")
    assert cap.exit_code == 0
    total = len("first line\r\n") + 1000 * 1002 + len("last line\r\n")
    assert cap.output.total == total and len(cap.output.head) + cap.output.tail_size == 4096
    lines = cap.text().split("\n")
    assert lines[0] == "first line" and lines[-1] == "last line"
    cut = [line for line in lines if line.startswith("[benchfarm:")]
    assert len(cut) == 1
    assert cut[0] == (f"[benchfarm: {total - 4096} bytes cut from the middle of this output; "
                      f"the serial log has them all]")


def test_shell_output_without_prompt_after_the_end_marker_is_the_shells_fault():
    cap = ShellOutput("ABCDEFGHIJ", r"\$ ", limit=1024)
    cap.feed(b"ABCDEFGHIJok\r\nABCDEFGHIJ")
    with pytest.raises(BoardFault):
        cap.feed(b"garbage" * 20_000)


def test_shell_text_is_labgrids_shape():
    assert shell_text(b"a\r\n\x1b[1mb\x1b[0m\r\n") == "a\nb"
    assert shell_text(b"caf\xc3") == "caf\ufffd"          # a cut through a character


def test_a_serial_log_without_a_file_keeps_head_and_tail():
    log = SerialLog(limit=1000)
    data = os.urandom(50_000)
    for i in range(0, len(data), 333):
        log.add(0.0, data[i:i + 333])
    assert log.size == 50_000
    kept = log.bytes()
    assert kept.startswith(data[:500]) and kept.endswith(data[-500:])
    assert b"[benchfarm: 49000 bytes cut from the middle of this console log" in kept


def test_a_serial_log_file_gets_every_byte_up_to_its_limit_and_says_the_rest(tmp_path):
    log = SerialLog(tmp_path / "serial.log", limit=100)
    log.add(0.0, b"a" * 60)
    log.add(0.0, b"b" * 60)
    log.add(0.0, b"c" * 10)
    log.close()
    text = (tmp_path / "serial.log").read_bytes()
    assert text.startswith(b"a" * 60 + b"b" * 40 + b"\n[benchfarm: the serial log stopped at 100 "
                           b"bytes; 30 more bytes were not kept]")
