"""The real Prometheus and promtool (Debian package `prometheus`) for the tests that need them.

On a laptop without them these tests skip, saying how to install them; CI (`.ci/run` installs the
package and sets UPGRADER_REQUIRE_PROMETHEUS=1) fails instead of skipping.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import free_port, required_binary

ROOT = Path(__file__).resolve().parent.parent
INSTALL = "install it with `sudo apt-get install prometheus` (Debian/Ubuntu: gives prometheus and promtool)"


def binary(name: str) -> str:
    """The path of `name`, or a skip (a failure where Prometheus is required) naming how to install it."""
    return required_binary(name, INSTALL, "UPGRADER_REQUIRE_PROMETHEUS")


def rendered_deploy() -> list[dict[str, Any]]:
    """deploy/ as kustomize renders it (real kubectl), so runbook URLs are the ones users get."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed on this machine")
    out = subprocess.run(
        [kubectl, "kustomize", str(ROOT / "deploy")], capture_output=True, text=True, timeout=120, check=True
    )
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def write_rules(directory: Path) -> Path:
    """The PrometheusRule's groups as a Prometheus rule file (what the Operator hands Prometheus)."""
    rule = next(d for d in rendered_deploy() if d["kind"] == "PrometheusRule")
    path = directory / "upgrader-rules.yaml"
    path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}, sort_keys=False))
    return path


class Prometheus:
    """A real Prometheus server on loopback evaluating `rules` every second and scraping each target at
    its own interval (`targets`: {"host:port": "1s"}), all under one `job` label, as replicas behind
    one ServiceMonitor are (a slower one lets a test hold a replica's last sample for seconds)."""

    def __init__(self, directory: Path, targets: dict[str, str], rules: Path,
                 labels: dict[str, str] | None = None, job: str = "upgrader-metrics") -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        scrapes = [
            {"job_name": f"{job}-{i}", "scrape_interval": interval, "scrape_timeout": "800ms",
             "static_configs": [{"targets": [target], "labels": labels or {}}],
             "relabel_configs": [{"target_label": "job", "replacement": job}]}
            for i, (target, interval) in enumerate(targets.items())
        ]
        config = {"global": {"evaluation_interval": "1s"}, "rule_files": [str(rules)], "scrape_configs": scrapes}
        (directory / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.log = directory / "prometheus.log"
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [binary("prometheus"), f"--config.file={directory / 'prometheus.yml'}",
                 f"--storage.tsdb.path={directory / 'data'}", f"--web.listen-address=127.0.0.1:{self.port}",
                 "--log.level=warn"],
                stdout=out, stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 60
        while not self._ready():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"prometheus did not start: {self.log.read_text()[-2000:]}")
            time.sleep(0.2)

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    def api(self, path: str, **params: Any) -> Any:
        query = urllib.parse.urlencode({k: v for k, v in params.items() if v is not None})
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{query}", timeout=30) as response:
            body = json.loads(response.read())
        assert body["status"] == "success", body
        return body["data"]

    def instant(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        return list(self.api("query", query=expr, time=at)["result"])

    def series_range(self, expr: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
        return list(self.api("query_range", query=expr, start=start, end=end, step=step)["result"])

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
