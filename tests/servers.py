"""Real servers for tests (Prometheus, Pushgateway): started on free loopback ports."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_http(url: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


@contextmanager
def server(command: Sequence[str], ready_url: str, log: Path) -> Iterator[subprocess.Popen]:
    """Run a server until the block ends; its output goes to ``log``."""
    binary = shutil.which(command[0])
    if binary is None:
        raise RuntimeError(f"{command[0]} is not installed (make test installs it)")
    with log.open("w") as output:
        process = subprocess.Popen([binary, *command[1:]], stdout=output,
                                   stderr=subprocess.STDOUT)
        try:
            wait_http(ready_url)
            yield process
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()


@contextmanager
def pushgateway(workdir: Path) -> Iterator[str]:
    port = free_port()
    address = f"127.0.0.1:{port}"
    with server(["prometheus-pushgateway", f"--web.listen-address={address}"],
                f"http://{address}/-/ready", workdir / "pushgateway.log"):
        yield address
