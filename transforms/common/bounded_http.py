"""HTTP requests with a total deadline and a cap on the bytes read (issue 35, items 9 and 10).

urllib's `timeout` limits each socket operation, not the request: a server that sends one byte
every half second never trips it, and a reply is read whole however long it is. Here

- a request has one deadline: a watchdog shuts its socket down when it passes, wherever the
  request is (sending, waiting for the status line, reading headers or the body), and the
  request then fails as a timeout however many bytes came in;
- at most `cap` bytes of a reply body are read: a longer one is refused (ReplyTooLarge) without
  reading the rest, and so is one whose Content-Length already says it is longer.

Proxies and HTTPS work as with urllib.urlopen (the opener is urllib's, with connection classes
that hand their socket to the request's watchdog).
"""
from __future__ import annotations

import http.client
import socket
import threading
import time
import urllib.request
from typing import Optional

_READ_PIECE = 64 * 1024
_ACTIVE = threading.local()  # the deadline of the request this thread is opening


class ReplyTooLarge(ValueError):
    """A reply body over the cap (not retried: the same request gets the same reply)."""


class Deadline:
    """One request's deadline: shuts the request's socket down when it passes."""

    def __init__(self, seconds: float):
        self.seconds = max(0.0, seconds)
        self.at = time.monotonic() + self.seconds
        self.expired = False
        self._sock: Optional[socket.socket] = None
        self._lock = threading.Lock()
        self._timer = threading.Timer(self.seconds, self._expire)
        self._timer.daemon = True
        self._timer.start()

    def left(self) -> float:
        return self.at - time.monotonic()

    def attach(self, sock) -> None:
        with self._lock:
            self._sock = sock
            expired = self.expired
        if expired:
            _shut(sock)

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            sock = self._sock
        if sock is not None:
            _shut(sock)

    def cancel(self) -> None:
        self._timer.cancel()
        if time.monotonic() >= self.at:  # the timer may not have run yet
            self.expired = True


def _shut(sock) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)  # wakes a thread blocked in recv on it (close does not)
    except OSError:
        pass


def _watch(sock) -> None:
    deadline = getattr(_ACTIVE, "deadline", None)
    if deadline is not None and sock is not None:
        deadline.attach(sock)


class _HTTPConnection(http.client.HTTPConnection):
    def connect(self):
        super().connect()
        _watch(self.sock)


class _HTTPSConnection(http.client.HTTPSConnection):
    def connect(self):
        super().connect()  # the TLS socket: shutting it down ends the request too
        _watch(self.sock)


class _HTTPHandler(urllib.request.HTTPHandler):
    def http_open(self, req):
        return self.do_open(_HTTPConnection, req)


class _HTTPSHandler(urllib.request.HTTPSHandler):
    def https_open(self, req):
        kw = {"context": self._context}
        if getattr(self, "_check_hostname", None) is not None:  # Python < 3.12 only
            kw["check_hostname"] = self._check_hostname
        return self.do_open(_HTTPSConnection, req, **kw)


_OPENER = urllib.request.build_opener(_HTTPHandler, _HTTPSHandler)


def read_capped(resp, cap: int) -> bytes:
    """The body of `resp`, or ReplyTooLarge once it is over `cap` bytes (the rest is never read)."""
    length = resp.headers.get("Content-Length") if getattr(resp, "headers", None) is not None else None
    if length is not None and length.strip().isdigit() and int(length) > cap:
        raise ReplyTooLarge(f"reply is {int(length)} bytes, over the {cap} bytes allowed")
    buf = bytearray()
    while True:
        piece = resp.read(min(_READ_PIECE, cap + 1 - len(buf)))
        if not piece:
            return bytes(buf)
        buf += piece
        if len(buf) > cap:
            raise ReplyTooLarge(f"reply is over the {cap} bytes allowed")


class DeadlineExpired(TimeoutError):
    pass


def open_and_read(req: urllib.request.Request, seconds: float, cap: int, error_cap: int = 300):
    """(status 200..299 body bytes) of `req`, the whole exchange within `seconds`.

    Raises DeadlineExpired when the deadline passes (whatever the socket said), ReplyTooLarge
    for a body over `cap`, and urllib.error.HTTPError with `.detail` (its first `error_cap`
    bytes of body, decoded) for an HTTP error status. Other failures (refused, reset, a
    malformed status line) raise as urllib/http.client raise them."""
    import urllib.error
    deadline = Deadline(seconds)
    _ACTIVE.deadline = deadline
    try:
        try:
            with _OPENER.open(req, timeout=max(seconds, 0.001)) as resp:
                _ACTIVE.deadline = None
                body = read_capped(resp, cap)
        except urllib.error.HTTPError as e:
            _ACTIVE.deadline = None
            try:
                e.detail = (e.read(error_cap) or b"")[:error_cap].decode("utf-8", "replace")
            except Exception:  # noqa: BLE001 -- the body is a courtesy; the status is the error
                e.detail = ""
            if deadline.expired:
                raise DeadlineExpired(f"no complete reply within {seconds:g} s") from None
            raise
        except ReplyTooLarge:
            raise
        except (OSError, http.client.HTTPException, ValueError) as e:
            if deadline.expired or deadline.left() <= 0:
                raise DeadlineExpired(f"no complete reply within {seconds:g} s") from None
            raise e
        if deadline.expired:
            raise DeadlineExpired(f"no complete reply within {seconds:g} s")
        return body
    finally:
        _ACTIVE.deadline = None
        deadline.cancel()
