"""Pytest fixtures that run a real ``redis-server`` on loopback for the RedisTier tests.

``redis_url`` (session scope) starts one server for the whole run (``--save '' --appendonly
no``: nothing touches the disk) on a free port, waits until it answers PING, and kills it at
the end; tests isolate themselves with a fresh pool prefix (``redis_prefix``).  ``redis_server``
(function scope) starts a private server a test may kill, restart (``restart()``: same port,
empty again, as after a restart without persistence) or reconfigure (``client()``, CONFIG SET);
``pool`` is a 10,000-byte RedisTier in a fresh pool of the shared server.
``redis_server_factory`` starts private servers with extra arguments (``--maxmemory 2mb``).  Both skip, saying why, only when
``redis-server`` or the ``redis`` package is not installed (``apt-get install redis-server``,
``pip install 'kvmm[redis]'``).

Import the fixtures into a test module with ``from kvmm.testing.redis_server import *``.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
import uuid

import pytest

from kvmm.tiers import RedisTier

__all__ = ["RedisServer", "redis_url", "redis_prefix", "redis_server", "redis_server_factory", "pool"]


class RedisServer:
    """One ``redis-server`` process on 127.0.0.1 (``url``, ``stop()``)."""

    def __init__(self, *extra_args: str) -> None:
        self.binary = shutil.which("redis-server")
        if self.binary is None:
            pytest.skip("redis-server is not installed (apt-get install -y redis-server); RedisTier tests need it")
        self.redis = pytest.importorskip("redis", reason="the redis package is not installed (pip install 'kvmm[redis]')")
        self.extra_args = [str(a) for a in extra_args]
        self.port = _free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process = None
        self.start()

    def start(self) -> None:
        self.process = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--protected-mode", "no", *self.extra_args],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = self.client()
        deadline = time.monotonic() + 10.0
        try:
            while True:
                try:
                    if client.ping():
                        break
                except self.redis.exceptions.ConnectionError:
                    pass
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"redis-server on port {self.port} did not answer PING")
                time.sleep(0.02)
        finally:
            client.close()

    def restart(self) -> None:
        """Kill the server and start an empty one on the same port (no persistence)."""
        self.stop()
        self.start()

    def client(self):
        """A plain redis-py client of this server (for CONFIG SET, FLUSHALL, ...)."""
        return self.redis.Redis.from_url(self.url, socket_timeout=1.0, socket_connect_timeout=1.0)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
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
def pool(redis_url, redis_prefix):
    """A RedisTier of 10,000 bytes in a fresh pool of the shared server (dropped at teardown)."""
    tier = RedisTier(10_000, url=redis_url, prefix=redis_prefix)
    yield tier
    tier.drop_pool()
    tier.close()


@pytest.fixture
def redis_server():
    server = RedisServer()
    yield server
    server.stop()


@pytest.fixture
def redis_server_factory():
    """``make(*extra_args)`` -> a private RedisServer; every one is stopped at teardown."""
    servers = []

    def make(*extra_args: str) -> RedisServer:
        servers.append(RedisServer(*extra_args))
        return servers[-1]

    yield make
    for server in servers:
        server.stop()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
