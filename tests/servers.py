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
    # Debian's build persists pushes to /var/lib by default: keep this one in memory.
    with server(["prometheus-pushgateway", f"--web.listen-address={address}",
                 "--persistence.file="],
                f"http://{address}/-/ready", workdir / "pushgateway.log"):
        yield address


@contextmanager
def prometheus(workdir: Path, targets: Sequence[str], rule_files: Sequence[Path] = (),
               interval: str = "1s") -> Iterator[str]:
    """A Prometheus scraping ``targets`` (honor_labels, like deploy/prometheus) with our
    rules; yields its address."""
    workdir.mkdir(parents=True, exist_ok=True)
    address = f"127.0.0.1:{free_port()}"
    config = workdir / "prometheus.yml"
    rules = "\n".join(f"  - {path}" for path in rule_files)
    config.write_text(
        f"global:\n  scrape_interval: {interval}\n  evaluation_interval: {interval}\n"
        f"rule_files:\n{rules or '  []'}\n"
        "scrape_configs:\n  - job_name: abstream\n    honor_labels: true\n"
        f"    static_configs:\n      - targets: {list(targets)!r}\n".replace("'", '"'))
    with server(["prometheus", f"--config.file={config}",
                 f"--storage.tsdb.path={workdir / 'tsdb'}", f"--web.listen-address={address}"],
                f"http://{address}/-/ready", workdir / "prometheus.log"):
        yield address
