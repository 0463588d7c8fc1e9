"""A throwaway PostgreSQL server on 127.0.0.1, run from Debian's ``postgresql`` package's
programs (``initdb``, ``postgres``): for the tests and the chaos benchmark.

Its data lives in a folder of its own; password logins only (scram-sha-256). PostgreSQL
does not run as root: as root, the server runs as the ``postgres`` user the package
creates, and its folder is that user's.
"""

from __future__ import annotations

import contextlib
import glob
import logging
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg

from abstream.errors import AbstreamError

log = logging.getLogger(__name__)

START_SECONDS = 30.0


def server_programs() -> Path:
    """The folder of PostgreSQL's server programs (the newest version installed)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(Path(p).parts[-3]))
    if found:
        return Path(found[-1]).parent
    on_path = shutil.which("initdb")
    if on_path is None:
        raise AbstreamError("PostgreSQL's server programs are not installed (Debian: "
                            "apt-get install postgresql)")
    return Path(on_path).parent


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class LocalPostgres:
    """A server with one database and one user, both ``abstream``."""

    user = database = "abstream"

    def __init__(self, password: str, port: int | None = None) -> None:
        self.password = password
        self.port = port or free_port()
        self.home = Path(tempfile.mkdtemp(prefix="abstream-postgres-"))
        self.data = self.home / "data"
        self.process: subprocess.Popen[bytes] | None = None
        self._owner = pwd.getpwnam("postgres") if os.geteuid() == 0 else None
        if self._owner is not None:
            os.chown(self.home, self._owner.pw_uid, self._owner.pw_gid)

    @property
    def dsn(self) -> str:
        """The connection string, without the password."""
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{self.database}"

    def _as_owner(self) -> dict[str, object]:
        """``subprocess`` arguments that run a program as the server's owner."""
        owner = self._owner
        return {} if owner is None else \
            {"user": owner.pw_uid, "group": owner.pw_gid, "extra_groups": []}

    def start(self) -> LocalPostgres:
        """Start the server (creating its data folder the first time); returns when it
        accepts logins."""
        programs = server_programs()
        if not (self.data / "PG_VERSION").exists():
            secret = self.home / "password"
            secret.write_text(self.password)
            if self._owner is not None:
                os.chown(secret, self._owner.pw_uid, self._owner.pw_gid)
            subprocess.run([str(programs / "initdb"), "-D", str(self.data), "-U", self.user,
                            "--auth=scram-sha-256", f"--pwfile={secret}", "-E", "UTF8",
                            "--no-sync"],
                           check=True, capture_output=True, **self._as_owner())
            secret.unlink()
        with open(self.home / "server.log", "ab") as output:
            self.process = subprocess.Popen(
                [str(programs / "postgres"), "-D", str(self.data), "-p", str(self.port),
                 "-c", "listen_addresses=127.0.0.1", "-c", f"unix_socket_directories={self.home}"],
                stdout=output, stderr=subprocess.STDOUT, start_new_session=True,
                **self._as_owner())
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_SECONDS
        while True:
            try:
                with psycopg.connect(self._admin_dsn(), password=self.password,
                                     autocommit=True, connect_timeout=2) as connection:
                    exists = connection.execute("SELECT 1 FROM pg_database WHERE datname = %s",
                                                (self.database,)).fetchone()
                    if not exists:
                        connection.execute(f'CREATE DATABASE "{self.database}"')
                return
            except psycopg.OperationalError:
                if self.process is not None and self.process.poll() is not None:
                    raise AbstreamError("the local PostgreSQL server exited: see "
                                        f"{self.home / 'server.log'}") from None
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def _admin_dsn(self) -> str:
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/postgres"

    def stop(self) -> None:
        """Stop the server (a fast shutdown); its data stays."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            self.process.wait(timeout=60)
        self.process = None

    def kill(self) -> None:
        """End the server at once (SIGKILL), as a crash would: its postmaster and its
        backends. Each backend makes itself a process group leader, so a SIGKILL of the
        postmaster or of its group leaves the backend of an open connection answering until
        it notices; the postmaster is stopped first so that it starts none meanwhile."""
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGSTOP)
            children = _children(self.process.pid)
            for pid in (*children, self.process.pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            self.process.wait(timeout=60)
            deadline = time.monotonic() + 60
            while any(_running(pid) for pid in children) and time.monotonic() < deadline:
                time.sleep(0.01)
        self.process = None

    def remove(self) -> None:
        """Stop the server and delete its folder."""
        self.stop()
        shutil.rmtree(self.home, ignore_errors=True)


def _children(pid: int) -> tuple[int, ...]:
    """The processes whose parent is ``pid``."""
    return tuple(int(Path(stat).parent.name) for stat in glob.glob("/proc/[0-9]*/stat")
                 if (fields := _stat(stat)) and int(fields[1]) == pid)


def _running(pid: int) -> bool:
    """Whether ``pid`` is a live process (not gone, not a zombie)."""
    fields = _stat(f"/proc/{pid}/stat")
    return bool(fields) and fields[0] != "Z"


def _stat(path: str) -> list[str]:
    """The fields of a ``/proc/<pid>/stat`` after the program's name (state, parent, ...);
    none for a process gone."""
    try:
        with open(path) as file:
            return file.read().rsplit(")", 1)[1].split()
    except OSError:
        return []
