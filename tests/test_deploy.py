"""The service manifests in deploy/ start what abstream is, probe what it serves, and give
it the time it takes to stop gracefully."""

from __future__ import annotations

import configparser
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from abstream.cli import _parser
from abstream.config import Config, load_config
from abstream.speed.runner import GRACE_SECONDS

DEPLOY = Path(__file__).parent.parent / "deploy"
PORT = Config().monitor.exporter.port


def _unit() -> configparser.ConfigParser:
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str
    unit.read(DEPLOY / "systemd" / "abstream.service")
    return unit


def _seconds(value: str) -> int:
    return int(value.removesuffix("s"))


def test_the_systemd_unit_runs_abstream_and_stops_it_gracefully(tmp_path):
    service = _unit()["Service"]
    command = service["ExecStart"].split()
    assert _parser().parse_args(command[1:]).command == "run"
    assert service["KillMode"] == "mixed", "SIGTERM to abstream, not to the JVM under it"
    assert _seconds(service["TimeoutStopSec"]) > GRACE_SECONDS
    assert service["Restart"] == "on-failure"
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed")
    here = (DEPLOY / "systemd" / "abstream.service").read_text().replace(
        command[0], str(Path(sys.executable).parent / "abstream"))
    local = tmp_path / "abstream.service"
    local.write_text(here.replace("User=abstream", "User=root")
                     .replace("Group=abstream", "Group=root"))
    checked = subprocess.run(["systemd-analyze", "verify", str(local)], capture_output=True,
                             text=True, check=False)
    assert (checked.returncode, checked.stderr) == (0, "")


def _documents(name: str) -> list[dict]:
    return list(yaml.safe_load_all((DEPLOY / "kubernetes" / name).read_text()))


def _probes(container: dict) -> dict[str, tuple[str, object]]:
    return {kind: (probe["httpGet"]["path"], probe["httpGet"]["port"])
            for kind, probe in container.items() if kind.endswith("Probe")}


def test_the_kubernetes_deployment_probes_health_and_readiness(tmp_path):
    documents = {d["kind"]: d for d in _documents("abstream-local.yaml")}
    config = tmp_path / "abstream.yaml"
    config.write_text(documents["ConfigMap"]["data"]["abstream.yaml"])
    load_config(config, environ={})
    deployment = documents["Deployment"]["spec"]
    assert deployment["replicas"] == 1 and deployment["strategy"]["type"] == "Recreate"
    pod = deployment["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] > GRACE_SECONDS
    (container,) = pod["containers"]
    assert _parser().parse_args(container["args"][1:]).command == "run"
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"metrics": PORT}
    assert _probes(container) == {"startupProbe": ("/healthz", "metrics"),
                                  "livenessProbe": ("/healthz", "metrics"),
                                  "readinessProbe": ("/readyz", "metrics")}
    environment = {e["name"]: e["value"] for e in container["env"]}
    assert load_config(environ=environment).monitor.exporter.host == "0.0.0.0"


def test_the_spark_application_probes_its_driver():
    (application,) = _documents("abstream-sparkapplication.yaml")
    spec = application["spec"]
    assert spec["mode"] == "cluster" and spec["restartPolicy"]["type"] == "OnFailure"
    assert _parser().parse_args(spec["arguments"]).command == "run"
    driver = spec["driver"]["template"]["spec"]
    assert driver["terminationGracePeriodSeconds"] > GRACE_SECONDS
    (container,) = driver["containers"]
    assert _probes(container) == {"livenessProbe": ("/healthz", PORT),
                                  "readinessProbe": ("/readyz", PORT)}
    environment = {e["name"]: e["value"] for e in spec["driver"]["env"]}
    assert load_config(environ=environment).monitor.exporter.host == "0.0.0.0"
