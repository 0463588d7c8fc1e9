"""A single-node Kafka broker (KRaft: broker and controller in one JVM) on 127.0.0.1, run
from Maven Central's JARs: for local use (``abstream kafka-local``) and for tests.

The JARs are downloaded once into the cache and checked against pinned SHA-1 sums; the
broker's data, configuration, log and pid file live in its home folder.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from abstream.config import Config
from abstream.errors import AbstreamError, StepFailed
from abstream.layout import Layout

log = logging.getLogger(__name__)

MAVEN_CENTRAL = "https://repo1.maven.org/maven2"
JAR_LIST = "kafka-broker-jars.txt"
START_SECONDS = 90.0
STOP_SECONDS = 30.0
PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"

_LOG4J = """\
rootLogger.level = WARN
rootLogger.appenderRef.file.ref = file
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{{ISO8601}} %p %c{{1}} %m%n
logger.kafka.name = kafka
logger.kafka.level = INFO
"""


@dataclass(frozen=True)
class Artifact:
    group: str
    name: str
    version: str
    sha1: str

    @property
    def file_name(self) -> str:
        return f"{self.name}-{self.version}.jar"

    @property
    def url(self) -> str:
        return f"{MAVEN_CENTRAL}/{self.group.replace('.', '/')}/{self.name}/{self.version}/" \
            f"{self.file_name}"


def broker_artifacts() -> list[Artifact]:
    text = resources.files("abstream.resources").joinpath(JAR_LIST).read_text()
    artifacts = []
    for line in text.splitlines():
        if line.strip() and not line.startswith("#"):
            coordinates, sha1 = line.split()
            group, name, version = coordinates.split(":")
            artifacts.append(Artifact(group, name, version, sha1))
    return artifacts


def fetch_jars(cache: Path) -> list[Path]:
    """The broker's JARs in ``cache``, downloaded and checked the first time."""
    cache.mkdir(parents=True, exist_ok=True)
    paths = []
    for artifact in broker_artifacts():
        path = cache / artifact.file_name
        if not path.exists():
            log.info("downloading %s", artifact.url)
            partial = path.with_suffix(".part")
            try:
                with urllib.request.urlopen(artifact.url, timeout=60) as response, \
                        partial.open("wb") as out:
                    shutil.copyfileobj(response, out)
            except OSError as exc:
                raise StepFailed("download", exc, f"cannot download {artifact.url}: {exc}") from exc
            digest = hashlib.sha1(partial.read_bytes(), usedforsecurity=False).hexdigest()
            if digest != artifact.sha1:
                partial.unlink()
                raise AbstreamError(f"{artifact.url}: SHA-1 {digest}, expected {artifact.sha1}")
            partial.replace(path)
        paths.append(path)
    return paths


@dataclass(frozen=True)
class LocalBroker:
    """One broker: its home folder (data, config, log, pid) and its loopback ports: a
    PLAINTEXT listener, the controller's, and, when ``sasl_port`` is set, a SASL_PLAINTEXT
    listener (PLAIN mechanism) for ``sasl_users`` (name -> password)."""

    home: Path
    jars_cache: Path
    port: int = 9092
    controller_port: int = 9093
    sasl_port: int | None = None
    sasl_users: Mapping[str, str] = field(default_factory=dict)

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def sasl_bootstrap_servers(self) -> str:
        if self.sasl_port is None:
            raise AbstreamError("this broker has no SASL listener")
        return f"127.0.0.1:{self.sasl_port}"

    @property
    def pid_file(self) -> Path:
        return self.home / "broker.pid"

    @property
    def log_file(self) -> Path:
        return self.home / "broker.log"

    def status(self) -> str:
        pid = self.pid()
        return f"Kafka on {self.bootstrap_servers}: " + (
            f"running (pid {pid}), home {self.home}" if pid else "stopped")

    def pid(self) -> int | None:
        """The broker's process id if it is running."""
        try:
            pid = int(self.pid_file.read_text())
        except (OSError, ValueError):
            return None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            return pid
        return pid

    def is_serving(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return True
        except OSError:
            return False

    def start(self) -> None:
        """Start the broker in the background (formatting its storage the first time) and
        wait until it accepts connections."""
        running = self.pid()
        if running is not None:
            log.info("the broker is already running (pid %d)", running)
            return
        if self.is_serving():
            raise AbstreamError(f"port {self.port} is taken by another process")
        classpath = os.pathsep.join(str(p) for p in fetch_jars(self.jars_cache))
        config = self._write_config()
        java = _java()
        logging_option = f"-Dlog4j2.configurationFile=file:{self.home / 'log4j2.properties'}"
        if not (self.home / "data" / "meta.properties").exists():
            _run([java, "-cp", classpath, logging_option, "kafka.tools.StorageTool", "format",
                  "-t", _cluster_id(), "-c", str(config), "--ignore-formatted"])
        with self.log_file.open("ab") as out:
            process = subprocess.Popen(
                [java, "-Xms128m", "-Xmx512m", "-XX:+UseG1GC", "-Djava.awt.headless=true",
                 logging_option, "-cp", classpath, "kafka.Kafka", str(config)],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True)
        self.pid_file.write_text(str(process.pid))
        deadline = time.monotonic() + START_SECONDS
        while not self.is_serving():
            if process.poll() is not None:
                raise AbstreamError(f"the broker exited with code {process.returncode}; "
                                    f"see {self.log_file}")
            if time.monotonic() > deadline:
                self.stop()
                raise AbstreamError(f"the broker did not start in {START_SECONDS:.0f} s; "
                                    f"see {self.log_file}")
            time.sleep(0.2)
        log.info("Kafka broker on %s (pid %d)", self.bootstrap_servers, process.pid)

    def stop(self, kill: bool = False) -> None:
        """Stop the broker (SIGTERM, then SIGKILL if it does not stop in time)."""
        pid = self.pid()
        if pid is None:
            self.pid_file.unlink(missing_ok=True)
            return
        os.kill(pid, signal.SIGKILL if kill else signal.SIGTERM)
        deadline = time.monotonic() + STOP_SECONDS
        while self.pid() is not None and time.monotonic() < deadline:
            _reap(pid)
            time.sleep(0.2)
        if self.pid() is not None:
            os.kill(pid, signal.SIGKILL)
            _reap(pid)
        self.pid_file.unlink(missing_ok=True)

    def _write_config(self) -> Path:
        self.home.mkdir(parents=True, exist_ok=True)
        (self.home / "log4j2.properties").write_text(
            _LOG4J.format(log=self.home / "kafka-server.log"))
        config = self.home / "server.properties"
        config.write_text("\n".join(f"{k}={v}" for k, v in {
            "process.roles": "broker,controller",
            "node.id": 1,
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},"
                         f"CONTROLLER://127.0.0.1:{self.controller_port}" + self._sasl_listener,
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}" + self._sasl_listener,
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,"
                                              "SASL_PLAINTEXT:SASL_PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            **self._sasl_settings(),
            "controller.listener.names": "CONTROLLER",
            "log.dirs": self.home / "data",
            "num.partitions": 1,
            "offsets.topic.replication.factor": 1,
            "transaction.state.log.replication.factor": 1,
            "transaction.state.log.min.isr": 1,
            "share.coordinator.state.topic.replication.factor": 1,
            "share.coordinator.state.topic.min.isr": 1,
            "group.initial.rebalance.delay.ms": 0,
            "num.network.threads": 2,
            "num.io.threads": 2,
        }.items()) + "\n")
        return config


    @property
    def _sasl_listener(self) -> str:
        return "" if self.sasl_port is None else f",SASL_PLAINTEXT://127.0.0.1:{self.sasl_port}"

    def _sasl_settings(self) -> dict[str, str]:
        if self.sasl_port is None:
            return {}
        users = " ".join(f'user_{name}="{password}"'
                         for name, password in self.sasl_users.items())
        return {"sasl.enabled.mechanisms": "PLAIN",
                "listener.name.sasl_plaintext.plain.sasl.jaas.config":
                    f"{PLAIN_LOGIN_MODULE} required {users};"}


def _cluster_id() -> str:
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not java:
        raise AbstreamError("java not found: install a JDK 17 or set JAVA_HOME")
    return java


def _run(command: list[str]) -> None:
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise AbstreamError(f"{' '.join(command[-6:])} failed: "
                            f"{(done.stderr or done.stdout).strip().splitlines()[-1:]}")


def _reap(pid: int) -> None:
    """Collect the exit status of a broker this process started (no zombie left)."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def local_broker(config: Config) -> LocalBroker:
    """The broker ``kafka.local`` describes; its home defaults to ``DATA_DIR/kafka``."""
    settings = config.kafka.local
    home = Path(settings.home) if settings.home else Layout.of(config.data_dir).local() / "kafka"
    return LocalBroker(home.expanduser(), settings.jars_cache.expanduser(), settings.port,
                       settings.controller_port)
