"""engine/server/http.py against slow clients (slowloris): a request head must arrive whole within
a deadline, a body within its own, and one client address holds at most a few connections, so
clients from other addresses are still served. Few connections, deadlines of a fraction of a second
(configurable for the test), every wait bounded; no model is loaded (/health needs none)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time

import pytest

from hearth.engine.server import HearthServer

DEADLINE = 0.5
BOUND_S = 15.0              # what "closed" may take at most here, a loaded machine included


@contextlib.contextmanager
def served(**limits):
    server = HearthServer(object(), "127.0.0.1", 0, **limits)
    t = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def connect(port: int, source: str = "127.0.0.1") -> socket.socket:
    s = socket.socket()
    s.settimeout(10)
    s.bind((source, 0))
    s.connect(("127.0.0.1", port))
    return s


def health(port: int, source: str) -> int:
    with connect(port, source) as s:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        out = b""
        while chunk := s.recv(65536):
            out += chunk
    return int(out.split(b" ", 2)[1])


def drip_until_closed(s: socket.socket, data: bytes, every: float = 0.05) -> float:
    """Send `data` a byte at a time until the server closes the connection; seconds it took
    (BOUND_S when it never did)."""
    t0 = time.monotonic()
    s.settimeout(every)
    i = 0
    while time.monotonic() - t0 < BOUND_S:
        try:
            if s.recv(65536) == b"":
                return time.monotonic() - t0
        except socket.timeout:
            pass
        except OSError:
            return time.monotonic() - t0
        try:
            s.send(data[i % len(data):i % len(data) + 1])
        except OSError:
            return time.monotonic() - t0
        i += 1
    return BOUND_S


def loopback_alias_works() -> bool:
    try:
        with socket.socket() as s:
            s.bind(("127.0.0.2", 0))
        return True
    except OSError:
        return False


def test_a_head_dripped_a_byte_at_a_time_is_cut_off_at_the_deadline():
    with served(head_deadline_s=DEADLINE) as server:
        s = connect(server.port)
        s.sendall(b"GET /health HTTP/1.1\r\n")
        took = drip_until_closed(s, b"X-Drip: a\r\n")
        s.close()
    assert took < BOUND_S, "the server kept a dripping request head for ever"


def test_a_connection_that_never_sends_is_cut_off_at_the_deadline():
    with served(head_deadline_s=DEADLINE) as server:
        with connect(server.port) as s:
            s.settimeout(BOUND_S)
            assert s.recv(10) == b""             # closed, not left waiting for 120 s


def test_a_body_dripped_a_byte_at_a_time_is_a_408():
    with served(head_deadline_s=DEADLINE, body_deadline_s=DEADLINE) as server:
        with connect(server.port) as s:
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n{")
            took = drip_until_closed(s, b" ")
    assert took < BOUND_S


@pytest.mark.skipif(not loopback_alias_works(), reason="127.0.0.2 cannot be bound here")
def test_one_address_cannot_take_every_connection():
    with served(head_deadline_s=30.0, max_per_address=3, max_connections=8) as server:
        slow = [connect(server.port) for _ in range(3)]
        try:
            for s in slow:
                s.sendall(b"GET /health HTTP/1.1\r\nX-Drip: ")
            time.sleep(0.2)                      # the three are accepted and hold their threads
            assert health(server.port, "127.0.0.1") == 503      # a fourth from the same address
            assert health(server.port, "127.0.0.2") == 200      # another address is served
        finally:
            for s in slow:
                s.close()


@pytest.mark.skipif(not loopback_alias_works(), reason="127.0.0.2 cannot be bound here")
def test_health_answers_during_a_slowloris_from_one_address():
    """The attack of the report, made small: more dripping connections than the server has threads
    would hold, from one address; another address's /health is answered throughout."""
    with served(head_deadline_s=DEADLINE, max_per_address=4, max_connections=6) as server:
        stop = threading.Event()

        def attacker():
            while not stop.is_set():
                with contextlib.suppress(OSError):
                    s = connect(server.port)
                    s.sendall(b"GET /health HTTP/1.1\r\n")
                    drip_until_closed(s, b"X-Drip: a\r\n", every=0.05)
                    s.close()
        threads = [threading.Thread(target=attacker, daemon=True) for _ in range(8)]
        for t in threads:
            t.start()
        try:
            time.sleep(0.3)
            statuses = [health(server.port, "127.0.0.2") for _ in range(5)]
        finally:
            stop.set()
            for t in threads:
                t.join(BOUND_S + 5)
    assert statuses == [200] * 5, statuses
