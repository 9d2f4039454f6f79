"""A labgrid SerialDriver on a socket:// port reads what has arrived in one call (lab/serialport)."""

from __future__ import annotations

import socket
import threading
import time

from labgrid import Target
from labgrid.driver import SerialDriver
from labgrid.resource import NetworkSerialPort

from benchfarm.lab.serialport import read_in_chunks


def _console_server(payload: bytes) -> tuple[socket.socket, threading.Event, threading.Event]:
    """A console that sends `payload` once told to: pyserial's open drops what arrived before
    it was done (reset_input_buffer)."""
    server = socket.create_server(("127.0.0.1", 0))
    go, sent = threading.Event(), threading.Event()

    def serve() -> None:
        conn, _ = server.accept()
        go.wait(5)
        conn.sendall(payload)
        sent.set()
        time.sleep(2)
        conn.close()
    threading.Thread(target=serve, daemon=True).start()
    return server, go, sent


def _driver(port: int) -> SerialDriver:
    target = Target("console-test")
    NetworkSerialPort(target, name=None, host="127.0.0.1", port=port, speed=115200,
                      protocol="raw")
    driver = SerialDriver(target, name=None)
    target.activate(driver)
    return driver


def test_a_socket_console_reads_what_has_arrived_in_one_call():
    payload = bytes(range(256)) * 40                      # 10 KiB, one burst of a boot log
    server, go, sent = _console_server(payload)
    try:
        driver = _driver(server.getsockname()[1])
        assert read_in_chunks(driver) and read_in_chunks(driver)      # idempotent
        go.set()
        assert sent.wait(5)
        time.sleep(0.1)
        got = driver.read(size=1, timeout=1.0)            # what labgrid's expect asks for
        assert got == payload
        driver.target.deactivate(driver)
    finally:
        server.close()


def test_unpatched_the_same_port_hands_over_one_byte_per_read():
    # why the patch exists: pyserial says 1 byte is waiting whatever the socket holds
    server, go, sent = _console_server(b"x" * 1000)
    try:
        driver = _driver(server.getsockname()[1])
        go.set()
        assert sent.wait(5)
        time.sleep(0.1)
        assert driver.read(size=1, timeout=1.0) == b"x"
        driver.target.deactivate(driver)
    finally:
        server.close()
