"""Security: unguessable tokens, no release or extension without the token, passwords kept
out of errors and logs, a least-privilege ACL user, and TLS (rediss://) through providers."""

from __future__ import annotations

import logging
import os
import subprocess
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from support.samples import TOKEN

from redlock_deco import (
    Lock,
    LockLost,
    ProviderError,
    Semaphore,
    limited,
    locked,
    register_provider,
)
from redlock_deco import _scripts as lua
from redlock_deco._tokens import new_token
from redlock_deco.acl import acl_rules
from redlock_deco.testing import RedisServer, free_port

# host:pid:process-id:secret; the process id names the process's hand-off channel.

# The least privilege the library needs, from its one source (documented in GUARANTEES.md).
MINIMAL_ACL = " ".join(["on", ">locks-only", *acl_rules()])


def test_a_forked_child_never_repeats_its_parents_tokens() -> None:
    new_token()  # the parent now has a batch of random bits in hand
    read, write = os.pipe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # 3.12+: fork with threads
        pid = os.fork()
    if pid == 0:
        os.write(write, new_token().encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    child = os.read(read, 200).decode()
    os.close(read)
    parent = new_token()
    child_parts, parent_parts = TOKEN.match(child), TOKEN.match(parent)
    assert child_parts and parent_parts and child_parts["secret"] != parent_parts["secret"]
    # A channel of its own too: the parent's grants must not wake the child's waiters.
    assert child_parts["procid"] != parent_parts["procid"]


def test_knowing_the_name_without_the_token_releases_and_extends_nothing(
    r: redis.Redis,
) -> None:
    with Lock("guarded", ttl=5) as lock:
        stolen = r.get("lock:guarded").decode()  # type: ignore[union-attr]
        guess = stolen.rsplit(":", 1)[0] + ":" + "0" * 32  # right host, pid, process; wrong secret
        keys = ("lock:guarded", "{lock:guarded}:queue")
        for leaving in (0, 1):  # neither as a holder nor as a waiter giving up
            entry = f"{guess}|5000|1"  # a waiter's queue entry, had it queued
            assert r.eval(lua.LOCK_RELEASE.source, 2, *keys, guess, 1000, 1, leaving, entry, 1) == 0
        assert r.eval(lua.LOCK_EXTEND.source, 1, "lock:guarded", guess, 999_999) == 0
        theirs = redis.lock.Lock(r, "lock:guarded")
        theirs.local.token = guess.encode()
        with pytest.raises(redis.exceptions.LockNotOwnedError):
            theirs.release()
        assert lock.owned() and r.pttl("lock:guarded") <= 5000


def test_passwords_never_reach_errors_or_logs(caplog: pytest.LogCaptureFixture) -> None:
    secret = "hunter2-s3cret"
    caplog.set_level(logging.DEBUG)
    register_provider("pw", f"redis://app:{secret}@127.0.0.1:{free_port()}/0")
    seen: list[str] = []
    for attempt in (lambda: Lock("x", provider="pw", wait=0).acquire(),
                    lambda: register_provider("bad", f"http://app:{secret}@host")):  # fmt: skip
        with pytest.raises((redis.exceptions.ConnectionError, ProviderError)) as info:
            attempt()
        seen.append(str(info.value))
    assert not any(secret in text for text in seen)
    assert all(secret not in record.getMessage() for record in caplog.records)


@pytest.fixture
def acl_user(server: RedisServer) -> Iterator[str]:
    admin = server.client()
    admin.execute_command("ACL", "SETUSER", "locker", *MINIMAL_ACL.split())
    yield f"redis://locker:locks-only@127.0.0.1:{server.port}/0"
    admin.execute_command("ACL", "DELUSER", "locker")


def test_least_privilege_acl_user_runs_everything(acl_user: str, r: redis.Redis) -> None:
    register_provider("least", acl_user)

    @locked("order:{n}", provider="least", ttl=0.3)
    def renewed(n: int) -> int:
        time.sleep(0.8)  # renewals, under the restricted user
        return n

    @limited("export", limit=2, provider="least")
    def export() -> str:
        return "ok"

    assert renewed(1) == 1 and export() == "ok"
    outcome: list[BaseException | bool] = []

    def waiter(wait: float) -> None:
        try:
            lock = Lock("busy", provider="least", wait=wait)
            outcome.append(lock.acquire())
            if outcome[-1]:
                lock.release()
        except BaseException as exc:
            outcome.append(exc)

    with Lock("busy", provider="least"):
        # Waiting (the queue, the grant subscription) works under the restricted user too:
        # one waiter gives up, the next is queued -- only a listening waiter queues -- ...
        t = threading.Thread(target=waiter, args=(0.2,))
        t.start()
        t.join(5)
        assert outcome == [False]
        t = threading.Thread(target=waiter, args=(5,))
        t.start()
        deadline = time.monotonic() + 5
        while not r.exists("{lock:busy}:queue"):
            assert time.monotonic() < deadline, "the waiter never queued"
            time.sleep(0.005)
        assert Semaphore("s", limit=1, provider="least").holders() == 0
    t.join(5)  # ... and the release hands it the lock
    assert outcome == [False, True]
    restricted = redis.Redis.from_url(acl_user)
    with pytest.raises(redis.exceptions.NoPermissionError):
        restricted.get("payments:secret")  # nothing outside the lock prefixes
    with pytest.raises(redis.exceptions.NoPermissionError):
        restricted.flushall()
    assert r.dbsize() == 0


def _certificates(directory: Path) -> tuple[Path, Path, Path]:
    ca_key, ca, key, csr, cert = (
        directory / n for n in ("ca.key", "ca.crt", "r.key", "r.csr", "r.crt")
    )
    run = lambda *args: subprocess.run(args, check=True, capture_output=True, timeout=60)  # noqa: E731 - local shorthand
    run(
        "openssl",
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "1",
        "-subj",
        "/CN=redlock-deco-test-ca",
        "-keyout",
        str(ca_key),
        "-out",
        str(ca),
    )
    run(
        "openssl",
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=127.0.0.1",
        "-addext",
        "subjectAltName=IP:127.0.0.1",
        "-keyout",
        str(key),
        "-out",
        str(csr),
    )
    run("openssl", "x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key),
        "-CAcreateserial", "-days", "1", "-copy_extensions", "copy", "-out", str(cert))  # fmt: skip
    return ca, cert, key


def _tls_server(tmp_path: Path) -> tuple[RedisServer, str]:
    """A started server with a TLS port, and a ``rediss://`` URL for it (or a skip)."""
    if subprocess.run(["which", "openssl"], capture_output=True).returncode:
        pytest.skip("openssl is not installed")
    ca, cert, key = _certificates(tmp_path)
    tls_port = free_port()
    server = RedisServer(args=("--tls-port", str(tls_port), "--tls-cert-file", str(cert),
                               "--tls-key-file", str(key), "--tls-ca-cert-file", str(ca),
                               "--tls-auth-clients", "no"))  # fmt: skip
    try:
        server.start()
    except RuntimeError as exc:
        # Only a build without TLS skips (Redis 6 rejects the directive; Redis 7 and Valkey
        # say so once the config is read); a TLS build that fails on these files must fail.
        if "Failed finding TLS support" in str(exc) or ">>> 'tls-port" in str(exc):
            pytest.skip(f"this server was built without TLS ({server.binary})")
        raise
    return server, f"rediss://127.0.0.1:{tls_port}/0?ssl_ca_certs={ca}"


@pytest.mark.slow
def test_tls_through_a_rediss_url(tmp_path: Path) -> None:
    server, url = _tls_server(tmp_path)
    try:
        register_provider("tls", url)
        with Lock("over-tls", provider="tls", ttl=5) as lock:
            assert lock.owned()
            assert server.client().exists("lock:over-tls")
    finally:
        server.__exit__(None, None, None)


@pytest.mark.slow
@pytest.mark.parametrize("body", ["yields", "blocks"])
def test_an_asyncio_holder_over_tls_hears_a_restart(tmp_path: Path, body: str) -> None:
    """Review 10, 02: over TLS a socket can hold records while healthy, so the check of an
    idle connection did not poll it; with a body that gave the loop no turn after the
    restart, the release went out on the dead socket, was re-sent, found no key and was
    judged a clean exit (no LockLost) while a second holder was inside."""
    import asyncio

    import redlock_deco.asyncio as aio

    server, url = _tls_server(tmp_path)
    try:
        register_provider("tls", url + "&socket_timeout=10")

        async def hold() -> None:
            async with aio.Lock("tls-restart", provider="tls", ttl=30):
                await asyncio.sleep(0.05)
                server.restart()  # the lease is gone with the server's data
                assert server.client().set("lock:tls-restart", "someone-else", nx=True, px=5000)
                if body == "yields":
                    await asyncio.sleep(0.2)

        with pytest.raises(LockLost):
            asyncio.run(hold())
        assert server.client().get("lock:tls-restart") == b"someone-else"
    finally:
        server.__exit__(None, None, None)
