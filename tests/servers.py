"""Real servers for tests (Prometheus, Pushgateway, a Spark standalone cluster): started on
free loopback ports."""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
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


@contextmanager
def spark_cluster(workdir: Path, spark_home: Path, workers: int = 2,
                  cores: int = 1, memory: str = "1g") -> Iterator[tuple[str, str]]:
    """A Spark standalone cluster on 127.0.0.1 from an installed pyspark: a master and
    ``workers`` workers; yields the master URL and the master's web UI address once every
    worker has registered."""
    workdir.mkdir(parents=True, exist_ok=True)
    spark_class = str(spark_home / "bin" / "spark-class")
    port, ui = free_port(), free_port()
    master, status = f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{ui}/json/"
    with ExitStack() as stack:
        stack.enter_context(server(
            [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
             "--port", str(port), "--webui-port", str(ui)],
            status, workdir / "master.log"))
        for number in range(workers):
            stack.enter_context(server(
                [spark_class, "org.apache.spark.deploy.worker.Worker", master,
                 "--host", "127.0.0.1", "--cores", str(cores), "--memory", memory,
                 "--webui-port", str(free_port()), "--work-dir", str(workdir / f"w{number}")],
                status, workdir / f"worker-{number}.log"))
        _wait_for_workers(status, workers)
        yield master, f"http://127.0.0.1:{ui}"


def _wait_for_workers(url: str, workers: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        with urllib.request.urlopen(url, timeout=2) as response:
            if json.load(response).get("aliveworkers", 0) >= workers:
                return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{workers} Spark workers did not register in {timeout:.0f} s")
        time.sleep(0.2)


def listening_addresses(pid: int) -> set[tuple[ipaddress.IPv4Address | ipaddress.IPv6Address,
                                               int]]:
    """The TCP addresses and ports that a process and its descendants listen on (Linux)."""
    pids = _descendants(pid) | {pid}
    inodes = set()
    for each in pids:
        with contextlib.suppress(OSError):
            for fd in Path(f"/proc/{each}/fd").iterdir():
                with contextlib.suppress(OSError):
                    target = os.readlink(fd)
                    if target.startswith("socket:["):
                        inodes.add(target[8:-1])
    found = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:  # the process has ended
            return found
        for line in lines:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == "0A" and inode in inodes:  # 0A: LISTEN
                address, port = local.split(":")
                found.add((_proc_address(address), int(port, 16)))
    return found


def _proc_address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """/proc/net/tcp writes addresses as 32-bit words in host (little-endian) order."""
    raw = bytes.fromhex(text)
    return ipaddress.ip_address(b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4)))


def is_loopback(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    mapped = getattr(address, "ipv4_mapped", None)
    return address.is_loopback or (mapped is not None and mapped.is_loopback)


def _descendants(pid: int) -> set[int]:
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found
