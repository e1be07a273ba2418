"""Notifications end to end: a receiver on loopback gets, once each, the canary done, the promotion
awaited and the rollout done (generic JSON and Slack's body), and a halt; a receiver that fails is
retried with tenacity, and one that never answers never holds a pass up (docs/policy.md#notifications)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from tenacity import wait_none

from upgrader.commands.cli import main
from upgrader.controller.notifier import Notifier
from upgrader.core.policy.notices import Notice, NoticeKind, Webhook
from upgrader.core.report.document import RolloutStatus
from upgrader.core.report.kinds import Phase

from .test_rollout_object import SPEC, World


class Receiver:
    """A webhook receiver on loopback: what it was sent, per path; it fails the first `fail` POSTs."""

    def __init__(self, fail: int = 0, delay: float = 0.0) -> None:
        self.got: list[tuple[str, dict[str, Any]]] = []
        self.fail, self.delay = fail, delay
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # http.server's name
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                time.sleep(receiver.delay)
                if receiver.fail > 0:
                    receiver.fail -= 1
                    self.send_response(500)
                else:
                    receiver.got.append((self.path, body))
                    self.send_response(200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def wait_for(self, count: int, timeout: float = 10.0) -> list[tuple[str, dict[str, Any]]]:
        deadline = time.monotonic() + timeout
        while len(self.got) < count and time.monotonic() < deadline:
            time.sleep(0.02)
        return self.got


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.server.shutdown()


def test_a_rollout_tells_the_canary_the_promotion_and_the_end_once_each(
    receiver: Receiver, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hooks = [{"url": f"{receiver.url}/generic"}, {"url": f"{receiver.url}/slack", "format": "slack",
                                                  "events": ["awaitingPromotion", "done"]}]
    w = World({**SPEC, "maxParallelUpgrades": 2, "promotionGate": "canary",
               "notifications": {"webhooks": hooks}})
    kubeconfig = w.serve(tmp_path)
    try:
        w.run_until_waiting("awaiting-promotion")
        w.run(5)
        assert main(["promote", "--kubeconfig", kubeconfig, "--rollout", "default"]) == 0
        w.run(400, until="Done")
        w.run(3)
        got = receiver.wait_for(5)
    finally:
        w.cluster.stop()
    generic = [body for path, body in got if path == "/generic"]
    assert [b["kind"] for b in generic] == ["canaryDone", "awaitingPromotion", "done"], generic
    assert generic[0]["text"] == "the canary domain us-east-1a is done: 2 nodes"
    assert generic[0]["rollout"] == "driverrollout.gpu-upgrader.io/default" and generic[2]["progress"] == "6/6"
    assert generic[1]["text"].startswith("awaiting promotion: domain us-east-1a finished at ")
    slack = [body for path, body in got if path == "/slack"]
    assert [set(b) for b in slack] == [{"text"}, {"text"}]
    assert slack[0]["text"].startswith("[driverrollout.gpu-upgrader.io/default] awaiting promotion: ")
    assert slack[1]["text"] == "[driverrollout.gpu-upgrader.io/default] done: 6 of 6 nodes upgraded"


HALTED = RolloutStatus(Phase.HALTED, "halted: gpu-a-01 blocked")


def test_a_failing_receiver_is_retried_and_a_silent_one_holds_nothing_up() -> None:
    flaky = Receiver(fail=2)
    notifier = Notifier("rollout", wait=wait_none())
    notice = Notice(NoticeKind.HALTED, "halted: gpu-a-01 blocked")
    notifier.tell([Webhook(url=flaky.url)], [notice], HALTED)
    assert [b["text"] for _, b in flaky.wait_for(1)] == ["halted: gpu-a-01 blocked"]
    # The receiver has the body before the notifier's thread has read its answer and counted it.
    deadline = time.monotonic() + 5
    while notifier.sent + notifier.failed == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert (notifier.sent, notifier.failed) == (1, 0)
    slow = Receiver(delay=3.0)
    started = time.monotonic()
    notifier.tell([Webhook(url=slow.url)] * 3, [notice], HALTED)
    assert time.monotonic() - started < 0.5, "the pass never waits on a receiver"
    notifier.close(timeout=0.1)
    flaky.server.shutdown()
    slow.server.shutdown()
