"""A network console read in chunks, not one byte per call.

labgrid's SerialDriver reads `max(size, serial.in_waiting)` bytes. pyserial's `socket://` port
(labgrid's NetworkSerialPort with the raw protocol: ser2net in raw mode, a console server's TCP
port) answers `in_waiting` with 1 whenever anything is readable, so every read returns one byte:
one Python call, one labgrid debug log call, one boot-watch pass and one expect search per byte
of console output. A kernel's boot log (tens of kilobytes, in bursts) then queues in the socket
behind the reader, and each line is dated by when the reader got to it, tens to hundreds of
milliseconds after it arrived. The port's `in_waiting` here asks the kernel how many bytes the
socket holds (FIONREAD), so labgrid's own read takes what has arrived in one call; everything
else about the port (open, timeouts, writes, close) is pyserial's.
"""

from __future__ import annotations

import array
import fcntl
import termios
from typing import Any

from serial.urlhandler.protocol_socket import Serial as SocketSerial


class ChunkedSocketSerial(SocketSerial):
    """pyserial's socket:// port whose `in_waiting` is the byte count the socket holds."""

    @property
    def in_waiting(self) -> int:
        sock = getattr(self, "_socket", None)    # pyserial's, set by open()
        if not self.is_open or sock is None:
            return super().in_waiting        # pyserial's own error for a closed port
        count = array.array("i", [0])
        try:
            fcntl.ioctl(sock.fileno(), termios.FIONREAD, count, True)
        except OSError:
            return super().in_waiting
        return count[0]


def read_in_chunks(console: Any) -> bool:
    """Make a labgrid SerialDriver on a socket:// port read what has arrived in one call;
    False for any other console (a local tty's and rfc2217's `in_waiting` count bytes already)."""
    port = getattr(console, "serial", None)
    if type(port) is SocketSerial:
        port.__class__ = ChunkedSocketSerial
    return isinstance(port, ChunkedSocketSerial)
