"""A PostgreSQL cluster of a test's (or a drill's) own: initdb into a temporary directory,
served on a free loopback port, stoppable and restartable on that port.

The shared server on 5432 is never touched: stopping it would break everyone else's
databases. The Debian binaries (/usr/lib/postgresql/<version>/bin) are used directly; as
root, they run as the ``postgres`` user (PostgreSQL refuses to run as root).

Made visible to a test module as the ``own_pg`` fixture with
``from tests.pg_cluster import own_pg_fixture  # noqa: F401``.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.redis_server import free_port, wait_for


def pg_bin_dir() -> Path:
    """The newest installed server's binaries (PG_BIN_DIR overrides)."""
    explicit = os.environ.get("PG_BIN_DIR")
    if explicit:
        return Path(explicit)
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"),
        key=lambda p: int(Path(p).parent.parent.name),
    )
    if not found:
        raise RuntimeError("no PostgreSQL server binaries in /usr/lib/postgresql/*/bin")
    return Path(found[-1]).parent


class PgCluster:
    """One cluster: ``initdb`` once, then ``start`` / ``stop`` as often as needed."""

    def __init__(self, *, port: int | None = None, root: Path | None = None) -> None:
        self.port = port or free_port()
        self.root = root or Path(tempfile.mkdtemp(prefix="agentops-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "postgres.log"
        self.bin = pg_bin_dir()
        self.process: subprocess.Popen[bytes] | None = None
        self._as_postgres = os.geteuid() == 0

    # --- the server -------------------------------------------------------------------
    def _argv(self, *argv: str) -> list[str]:
        if not self._as_postgres:
            return list(argv)
        user = pwd.getpwnam("postgres")
        return [
            *("setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--init-groups"),
            *argv,
        ]

    def init(self) -> None:
        if self._as_postgres:
            user = pwd.getpwnam("postgres")
            os.chown(self.root, user.pw_uid, user.pw_gid)
        subprocess.run(
            self._argv(
                str(self.bin / "initdb"),
                *("-D", str(self.data), "-U", "postgres", "--auth=trust"),
                *("-E", "UTF8", "--locale=C.UTF-8", "--no-sync", "--no-instructions"),
            ),
            check=True,
            capture_output=True,
            timeout=120,
        )

    def url(self, database: str = "postgres") -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{database}"

    def start(self) -> None:
        """Start the server (``postgres -D``, a child of this process) and wait until it
        accepts connections."""
        assert self.process is None, "already running"
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                self._argv(
                    str(self.bin / "postgres"),
                    *("-D", str(self.data), "-p", str(self.port)),
                    *("-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories="),
                    *("-c", "max_connections=200"),
                ),
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a Ctrl-C of the caller is not a fast shutdown
            )
        wait_for(self._answers, what="PostgreSQL to accept connections", log=self.log)

    def _answers(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            raise AssertionError(f"postgres exited ({self.process.returncode})\n{self.tail()}")
        try:
            with psycopg.connect(
                self.url().replace("postgres://", "postgresql://"), connect_timeout=2
            ):
                return True
        except psycopg.OperationalError:
            return False

    def stop(self, mode: str = "fast") -> None:
        """Shut the server down: ``fast`` (SIGINT: sessions are ended, then a checkpoint),
        ``smart`` (SIGTERM) or ``immediate`` (SIGQUIT)."""
        if self.process is None:
            return
        sig = {"smart": signal.SIGTERM, "fast": signal.SIGINT, "immediate": signal.SIGQUIT}[mode]
        try:
            self.process.send_signal(sig)
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)
        self.process = None

    def create_database(self, name: str) -> str:
        with psycopg.connect(
            self.url().replace("postgres://", "postgresql://"), autocommit=True
        ) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-4000:] if self.log.exists() else ""

    def destroy(self) -> None:
        """Stop the server (immediate, if it is still up) and remove its directory."""
        if self.process is not None:
            self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture(name="own_pg")
def own_pg_fixture() -> Iterator[PgCluster]:
    cluster = PgCluster()
    try:
        cluster.init()
        cluster.start()
        yield cluster
    finally:
        cluster.destroy()
