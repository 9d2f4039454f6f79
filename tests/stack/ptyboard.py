"""A board that is fast: a real /bin/sh on a pty, its console served on a TCP port.

The virtual boards' consoles carry ~150 KB/s; a memory test of a 1 GiB output needs a console at
loopback speed. This is what ser2net does for a board's UART, with a local shell as the board:
`python ptyboard.py` prints the port it listens on, serves one connection (bytes both ways
between the socket and the pty's master) and exits when either side closes.
"""

from __future__ import annotations

import os
import pty
import select
import socket
import sys

PROMPT = "board$ "


def serve() -> None:
    server = socket.create_server(("127.0.0.1", 0))
    print(server.getsockname()[1], flush=True)
    conn, _ = server.accept()
    server.close()
    pid, master = pty.fork()
    if pid == 0:
        os.execve("/bin/sh", ["sh", "-i"], {"PS1": PROMPT, "PATH": "/usr/bin:/bin",
                                            "HOME": "/tmp", "TERM": "dumb"})
    try:
        while True:
            ready, _, _ = select.select([conn, master], [], [])
            if conn in ready:
                data = conn.recv(65536)
                if not data:
                    break
                os.write(master, data)
            if master in ready:
                try:
                    data = os.read(master, 65536)
                except OSError:      # the shell exited
                    break
                if not data:
                    break
                conn.sendall(data)
    finally:
        conn.close()
        os.close(master)
        os.kill(pid, 9)
        os.waitpid(pid, 0)


if __name__ == "__main__":
    sys.exit(serve())
