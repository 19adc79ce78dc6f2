"""Limits on slow or greedy clients of the HTTP server (engine/server/http.py): request reading
bounded by a deadline for the whole head and for the body, and the 503 given to a connection
over a cap without serving it.

A per-receive timeout alone does not bound a request: a client that sends one byte every few
seconds (slowloris) keeps each receive short and the request unfinished for ever.
"""

from __future__ import annotations

import io
import json
import socket
import threading
import time

from .protocol import error_body

RETRY_AFTER_S = 2


class PerAddress:
    """Open connections by client address, at most `cap` from each."""

    def __init__(self, cap: int):
        self.cap = cap
        self._open: dict[str, int] = {}
        self._lock = threading.Lock()

    def take(self, address: str) -> bool:
        with self._lock:
            n = self._open.get(address, 0)
            if n >= self.cap:
                return False
            self._open[address] = n + 1
            return True

    def give_back(self, address: str) -> None:
        with self._lock:
            left = self._open.get(address, 1) - 1
            if left > 0:
                self._open[address] = left
            else:
                self._open.pop(address, None)


class DeadlineReader(io.RawIOBase):
    """The connection's bytes for the request's rfile, each receive bounded by what is left of the
    current deadline (a per-receive timeout alone lets a byte every few seconds go on for ever)."""

    def __init__(self, sock: socket.socket, idle_s: float):
        self.sock, self.idle_s = sock, idle_s
        self.deadline: float | None = None
        self._on_first_byte: float | None = None   # a deadline that starts with the next byte

    def readable(self) -> bool:
        return True

    def expect_head(self, seconds: float, from_now: bool) -> None:
        if from_now:
            self.deadline, self._on_first_byte = time.monotonic() + seconds, None
        else:
            self.deadline, self._on_first_byte = None, seconds

    def expect_body(self, seconds: float) -> None:
        self.deadline, self._on_first_byte = time.monotonic() + seconds, None

    def expect_nothing(self) -> None:
        self.deadline = self._on_first_byte = None

    def readinto(self, buffer) -> int:
        wait = self.idle_s
        if self.deadline is not None:
            wait = min(wait, self.deadline - time.monotonic())
            if wait <= 0:
                raise TimeoutError("the request did not arrive within its deadline")
        self.sock.settimeout(wait)
        try:
            n = self.sock.recv_into(buffer)
        finally:
            self.sock.settimeout(self.idle_s)
        if n and self._on_first_byte is not None:
            self.deadline, self._on_first_byte = time.monotonic() + self._on_first_byte, None
        return n


def refuse_busy(sock: socket.socket, why: str = "too many open connections", wait_s: float = 2.0) -> None:
    """Answer one connection 503 without serving it: read the request head (for at most `wait_s`
    in all), answer, then read until the client closes (at most `wait_s` more), so that closing
    never resets a connection whose request is unread (the client would see a reset instead of the
    answer)."""
    body = json.dumps(error_body(f"the server is busy: {why}; retry in {RETRY_AFTER_S} s",
                                 "server_error", "server_busy")).encode()
    head = (f"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nRetry-After: {RETRY_AFTER_S}\r\nConnection: close\r\n\r\n")
    try:
        end = time.monotonic() + wait_s
        seen = b""
        while b"\r\n\r\n" not in seen and len(seen) < 65536 and time.monotonic() < end:
            sock.settimeout(max(0.001, end - time.monotonic()))
            try:
                got = sock.recv(4096)
            except TimeoutError:
                break
            if not got:
                break
            seen += got
        sock.settimeout(wait_s)
        sock.sendall(head.encode() + body)
        sock.shutdown(socket.SHUT_WR)
        end = time.monotonic() + wait_s
        while time.monotonic() < end:
            sock.settimeout(max(0.001, end - time.monotonic()))
            if not sock.recv(65536):
                break
    except OSError:
        pass
    finally:
        sock.close()
