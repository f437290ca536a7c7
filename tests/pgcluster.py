"""A throwaway PostgreSQL cluster for the tests: temp dir, loopback port, trust auth.

As root (CI and sessions run as root) ``initdb`` refuses to run, so the server
runs as the ``postgres`` system user that Debian's package creates.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

PG_BIN_ENV = "CTXDB_PG_BIN"
DEFAULT_PG_BIN = "/usr/lib/postgresql/15/bin"
SERVER_USER = "postgres"
START_TIMEOUT_S = 30


class ClusterError(RuntimeError):
    pass


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class PostgresCluster:
    def __init__(self) -> None:
        self.bin_dir = Path(os.environ.get(PG_BIN_ENV, DEFAULT_PG_BIN))
        self.port = 0
        self.root: Path | None = None
        self.running = False

    def _run(self, *args: str) -> subprocess.CompletedProcess:
        command = [str(self.bin_dir / args[0]), *args[1:]]
        if os.geteuid() == 0:
            # su passes one shell command line; every argument here is ours.
            line = " ".join(_shell_quote(a) for a in command)
            command = ["su", SERVER_USER, "-s", "/bin/sh", "-c", line]
        return subprocess.run(command, capture_output=True, text=True)

    def start(self) -> str:
        if not (self.bin_dir / "initdb").is_file():
            raise ClusterError(
                f"PostgreSQL server binaries not found in {self.bin_dir} (set {PG_BIN_ENV}, or "
                "install them: apt-get install postgresql); the PostgreSQL tests cannot be skipped"
            )
        self.root = Path(tempfile.mkdtemp(prefix="ctxdb-pg-"))
        if os.geteuid() == 0:
            user = pwd.getpwnam(SERVER_USER)
            os.chown(self.root, user.pw_uid, user.pw_gid)
        data = self.root / "data"
        result = self._run("initdb", "-D", str(data), "-A", "trust", "-U", "postgres", "-E", "UTF8")
        if result.returncode != 0:
            raise ClusterError(f"initdb failed:\n{result.stdout}\n{result.stderr}")
        self.port = _free_port()
        options = (
            f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.root} "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        )
        log = self.root / "server.log"
        result = self._run(
            "pg_ctl", "-D", str(data), "-l", str(log), "-o", options,
            "-w", "-t", str(START_TIMEOUT_S), "start",
        )
        if result.returncode != 0:
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise ClusterError(f"pg_ctl start failed:\n{result.stdout}\n{result.stderr}\n{tail}")
        self.running = True
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    break
            except OSError:
                time.sleep(0.1)
        return self.url("postgres")

    def url(self, database: str) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        """A new, empty database in the cluster; its URL (dropped with the cluster)."""
        from sqlalchemy import create_engine, text

        admin = create_engine(self.url("postgres"), isolation_level="AUTOCOMMIT")
        try:
            with admin.connect() as connection:
                connection.execute(text(f'CREATE DATABASE "{name}"'))
        finally:
            admin.dispose()
        return self.url(name)

    def stop(self) -> None:
        if self.root is None:
            return
        if self.running:
            self._run("pg_ctl", "-D", str(self.root / "data"), "-m", "immediate", "-w", "stop")
            self.running = False
        shutil.rmtree(self.root, ignore_errors=True)
        self.root = None


def _shell_quote(value: str) -> str:
    import shlex

    return shlex.quote(value)


def public_tables(url: str) -> int:
    """How many tables (and views) the database at ``url`` holds in its schema public:
    0 where nothing made a store there."""
    from sqlalchemy import create_engine, text

    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            return connection.execute(text(
                "SELECT count(*) FROM information_schema.tables "
                "WHERE table_schema = 'public'")).scalar()
    finally:
        engine.dispose()
