"""Pytest fixtures that run a real ``redis-server`` on loopback for the RedisTier tests.

``redis_url`` (session scope) starts one server for the whole run (``--save '' --appendonly
no``: nothing touches the disk) on a free port, waits until it answers PING, and kills it at
the end; tests isolate themselves with a fresh pool prefix (``redis_prefix``).  ``redis_server``
(function scope) starts a private server a test may kill.  Both skip, saying why, only when
``redis-server`` or the ``redis`` package is not installed (``apt-get install redis-server``,
``pip install 'kvmm[redis]'``).

Import the fixtures into a test module with ``from tests.redis_server import *``.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
import uuid

import pytest

__all__ = ["RedisServer", "redis_url", "redis_prefix", "redis_server"]


class RedisServer:
    """One ``redis-server`` process on 127.0.0.1 (``url``, ``stop()``)."""

    def __init__(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.skip("redis-server is not installed (apt-get install -y redis-server); RedisTier tests need it")
        redis = pytest.importorskip("redis", reason="the redis package is not installed (pip install 'kvmm[redis]')")
        self.port = _free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--protected-mode", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = redis.Redis.from_url(self.url, socket_timeout=1.0, socket_connect_timeout=1.0)
        deadline = time.monotonic() + 10.0
        while True:
            try:
                if client.ping():
                    break
            except redis.exceptions.ConnectionError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"redis-server on port {self.port} did not answer PING")
            time.sleep(0.02)
        client.close()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)


@pytest.fixture(scope="session")
def redis_url():
    server = RedisServer()
    yield server.url
    server.stop()


@pytest.fixture
def redis_prefix():
    return f"kvmm-test-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def redis_server():
    server = RedisServer()
    yield server
    server.stop()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
