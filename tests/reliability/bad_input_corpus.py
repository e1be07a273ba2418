"""The rest of the bad-input corpus: plan's other inputs, kubeconfigs, command-line arguments and
environment; and CORPUS itself, every case test_bad_input.py feeds to the CLI."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from .bad_input_files import (
    PLAN_GOOD,
    TMP,
    Case,
    Content,
    EmptyDir,
    F,
    K,
    _list_cases,
    _policy_cases,
)

POLICY_FILE = str(Path(__file__).resolve().parents[2] / "policies" / "default.yaml")

# ----- plan's other inputs -------------------------------------------------------------------------

PROFILE = """profiles:
  - name: h100-550
    version: 1
    owner: gpu-platform
    qualification: {date: 2026-10-12, by: jdoe, record: GPU-4711}
    expires: 2027-10-12
    gpuProduct: NVIDIA-H100-80GB-HBM3
    driver: "550.90.07"
    kernel: 5.15.0-113-generic
    os: ubuntu22.04
    nodeSelector: ""
"""

PLAN_INPUTS: list[Case] = [
    Case("ledger-tag-with-spaces", "plan-inputs", (*PLAN_GOOD[:4], "--ledger", F),
         (f"--ledger {F}", "line 2", "spaces"), "550-5.15.0-105-generic-ubuntu22.04\n550 5.15.0 generic\n"),
    Case("ledger-missing", "plan-inputs", (*PLAN_GOOD[:4], "--ledger", F), (f"--ledger {F}", "No such file")),
    Case("ledger-binary", "plan-inputs", (*PLAN_GOOD[:4], "--ledger", F), (f"--ledger {F}", "not UTF-8"),
         b"\xff\xfe\x00\x01"),
    Case("ledger-directory", "plan-inputs", (*PLAN_GOOD[:4], "--ledger", F), (f"--ledger {F}", "directory"),
         EmptyDir()),
    Case("profiles-nested", "plan-inputs", (*PLAN_GOOD[:4], "--profiles", F), (f"profiles {F}", "nested too deeply"),
         "profiles: " + "[" * 10**5 + "\n"),
    Case("profiles-unknown-key", "plan-inputs", (*PLAN_GOOD[:4], "--profiles", F),
         (F, "profiles.0.colour", "unknown key"), PROFILE + "    colour: green\n"),
    Case("profiles-bad-date", "plan-inputs", (*PLAN_GOOD[:4], "--profiles", F),
         (F, "profiles.0.expires", "date"), PROFILE.replace("expires: 2027-10-12", "expires: next year")),
    Case("profiles-expires-before-qualified", "plan-inputs", (*PLAN_GOOD[:4], "--profiles", F),
         (F, "not after qualification.date"), PROFILE.replace("expires: 2027-10-12", "expires: 2026-01-01")),
    Case("profiles-missing", "plan-inputs", (*PLAN_GOOD[:4], "--profiles", F), (f"--profiles {F}", "No such file")),
    Case("profiles-list", "plan-inputs", (*PLAN_GOOD[:4], "--profiles", F), (F, "expected a mapping"), "- a\n"),
    Case("target-driver-5x0", "plan-inputs", (*PLAN_GOOD[:4], "--target-driver", "5x0"), ("--target-driver '5x0'",)),
    Case("target-driver-empty", "plan-inputs", (*PLAN_GOOD[:4], "--target-driver", ""),
         ("--target-driver ''", "empty")),
    Case("target-driver-double-dot", "plan-inputs", (*PLAN_GOOD[:4], "--target-driver", "550..1"),
         ("--target-driver '550..1'", "empty component")),
    Case("live-plan-target-driver", "plan-inputs", ("plan", "--dry-run", "--kubeconfig", K, "--target-driver", "x"),
         ("--target-driver 'x'",)),
    Case("live-plan-bad-policy", "plan-inputs", ("plan", "--dry-run", "--kubeconfig", K, "--policy", F),
         (F, "drain.enabled", "unknown key"), "drain: {enabled: true}\n", "policy.yaml"),
    Case("live-plan-bad-ledger", "plan-inputs", ("plan", "--dry-run", "--kubeconfig", K, "--ledger", F),
         (f"--ledger {F}", "spaces"), "a b\n"),
    # run judges starts by the same inputs (its preflight): refused before the cluster is asked anything
    Case("run-ledger-missing", "plan-inputs", ("run", "--kubeconfig", K, "--ledger", F),
         (f"--ledger {F}", "No such file")),
    Case("run-once-ledger-spaces", "plan-inputs", ("run", "--once", "--kubeconfig", K, "--ledger", F),
         (f"--ledger {F}", "line 1", "spaces"), "a b\n"),
    Case("run-profiles-unknown-key", "plan-inputs", ("run", "--kubeconfig", K, "--profiles", F),
         (F, "profiles.0.colour", "unknown key"), PROFILE + "    colour: green\n"),
    Case("run-floor-below-documented", "plan-inputs", ("run", "--kubeconfig", K, "--floor", "12=400"),
         ("--floor", "12=400")),
    Case("run-policy-preflight-two-sources", "plan-inputs", ("run", "--kubeconfig", K, "--policy", F),
         (F, "preflight.imageLedger", "exactly one of file and configMap"),
         "preflight: {imageLedger: {file: a.txt, configMap: gpu-operator/ledger}}\n", "policy.yaml"),
]

# ----- command-line arguments, environment, kubeconfig ----------------------------------------------

GARBAGE_KUBECONFIGS: list[tuple[str, Content | EmptyDir, tuple[str, ...]]] = [
    ("missing", None, ("does not exist",)),
    ("tabs", "apiVersion: v1\nclusters:\n\t- name: x\n", ("not valid YAML",)),
    ("binary", b"\x89PNG\r\n\x1a\n\x00\xff", ("not UTF-8",)),
    ("scalar", "hello\n", ("not a kubeconfig",)),
    ("empty", "", ("empty",)),
    ("contexts-not-a-list", "apiVersion: v1\nkind: Config\ncurrent-context: x\ncontexts: 5\n", ("contexts",)),
    ("directory", EmptyDir(), ("is a directory",)),
    ("nested", "clusters: " + "[" * 10**5 + "\n", ("nested deeper than 64 levels at line 1",)),
]
CLUSTER_COMMANDS: list[tuple[str, ...]] = [("status",), ("pause",), ("resume",), ("run", "--once"), ("run",),
                                           ("plan", "--dry-run")]


def _kubeconfig_cases() -> Iterator[Case]:
    for command in CLUSTER_COMMANDS:
        name = "-".join(c.strip("-") for c in command)
        yield Case(f"kubeconfig-{name}-context-nope", "kubeconfig", (*command, "--kubeconfig", K, "--context", "nope"),
                   ("--context nope", "no such context", "upgrader-sim"))
        for ident, content, words in GARBAGE_KUBECONFIGS:
            yield Case(f"kubeconfig-{name}-{ident}", "kubeconfig", (*command, "--kubeconfig", F),
                       (f"kubeconfig {F}", *words), content, "kubeconfig")


ARGS: list[Case] = [
    Case("no-command", "arguments", (), ("required: command",)),
    Case("unknown-command", "arguments", ("upgrade",), ("invalid choice: 'upgrade'",)),
    Case("unknown-flag", "arguments", ("status", "--kubeconfig", K, "--bogus"), ("unrecognized arguments: --bogus",)),
    Case("demo-nodes-0", "arguments", ("demo", "--nodes", "0"), ("--nodes", "'0'")),
    Case("demo-nodes-minus-3", "arguments", ("demo", "--nodes", "-3"), ("--nodes", "'-3'")),
    Case("demo-nodes-abc", "arguments", ("demo", "--nodes", "abc"), ("--nodes", "'abc'")),
    Case("demo-nodes-2", "arguments", ("demo", "--nodes", "2"), ("--nodes", "at least 3")),
    Case("demo-scenario-nope", "arguments", ("demo", "--scenario", "nope"), ("--scenario", "'nope'")),
    Case("demo-timeout-0", "arguments", ("demo", "--timeout", "0"), ("--timeout", "'0'")),
    Case("demo-bad-policy", "arguments", ("demo", "--policy", F), (F, "maxUnavailable"), "maxUnavailable: 120%\n"),
    Case("serve-nodes-0", "arguments", ("sim", "serve", "--nodes", "0", "--kubeconfig", f"{TMP}/sim.kubeconfig"),
         ("--nodes", "'0'")),
    Case("serve-nodes-minus-3", "arguments",
         ("sim", "serve", "--nodes", "-3", "--kubeconfig", f"{TMP}/sim.kubeconfig"), ("--nodes", "'-3'")),
    Case("serve-nodes-abc", "arguments", ("sim", "serve", "--nodes", "abc", "--kubeconfig", f"{TMP}/sim.kubeconfig"),
         ("--nodes", "'abc'")),
    Case("serve-nodes-2-with-audit-log", "arguments", ("sim", "serve", "--nodes", "2", "--kubeconfig",
                                                       f"{TMP}/sim.kubeconfig", "--audit-log", f"{TMP}/audit.jsonl"),
         ("--nodes", "at least 3")),
    Case("serve-port-70000", "arguments", ("sim", "serve", "--port", "70000", "--kubeconfig", f"{TMP}/sim.kubeconfig"),
         ("--port", "70000")),
    Case("serve-scenario-nope", "arguments",
         ("sim", "serve", "--scenario", "nope", "--kubeconfig", f"{TMP}/sim.kubeconfig"), ("--scenario", "'nope'")),
    Case("serve-kubeconfig-in-missing-dir", "arguments", ("sim", "serve", "--kubeconfig", f"{TMP}/no/such/kc"),
         ("--kubeconfig", "does not exist")),
    Case("serve-without-kubeconfig", "arguments", ("sim", "serve"), ("--kubeconfig",)),
    Case("status-output-xml", "arguments", ("status", "--kubeconfig", K, "-o", "xml"), ("-o/--output", "'xml'")),
    Case("plan-output-xml", "arguments", (*PLAN_GOOD[:4], "-o", "xml"), ("-o/--output", "'xml'")),
    Case("plan-without-dry-run", "arguments", ("plan", "--kubeconfig", K), ("--dry-run",)),
    Case("compat-floor-no-equals", "arguments", ("compat", "--driver", "550", "--cuda", "12.4", "--floor", "12"),
         ("--floor", "'12'")),
    Case("compat-floor-bad-version", "arguments",
         ("compat", "--driver", "550", "--cuda", "12.4", "--floor", "12=abc"), ("--floor", "'abc'")),
    Case("compat-floor-conflict", "arguments", ("compat", "--driver", "550", "--cuda", "12.4", "--floor",
                                                "12=525.60.13", "--floor", "12=525.60.14"), ("--floor",)),
    Case("compat-missing-cuda", "arguments", ("compat", "--driver", "550"), ("--cuda",)),
    Case("run-metrics-port-99999", "arguments", ("run", "--kubeconfig", K, "--metrics-port", "99999"),
         ("--metrics-port", "99999")),
    Case("run-metrics-port-abc", "arguments", ("run", "--kubeconfig", K, "--metrics-port", "abc"),
         ("--metrics-port", "'abc'")),
    Case("status-namespace-empty", "arguments", ("status", "--kubeconfig", K, "-n", ""), ("--namespace",)),
    Case("pause-namespace-empty", "arguments", ("pause", "--kubeconfig", K, "--namespace", ""), ("--namespace",)),
    Case("env-requeue-negative", "environment", ("run", "--kubeconfig", K),
         ("UPGRADER_REQUEUE_SECONDS", "greater than 0"), env={"UPGRADER_REQUEUE_SECONDS": "-1"}),
    Case("env-requeue-negative-once", "environment", ("run", "--once", "--kubeconfig", K),
         ("UPGRADER_REQUEUE_SECONDS",), env={"UPGRADER_REQUEUE_SECONDS": "-1"}),
    Case("env-min-pass-interval-negative", "environment", ("run", "--kubeconfig", K),
         ("UPGRADER_MIN_PASS_INTERVAL_SECONDS", "greater than or equal to 0"),
         env={"UPGRADER_MIN_PASS_INTERVAL_SECONDS": "-0.5"}),
    Case("env-lease-abc", "environment", ("run", "--kubeconfig", K),
         ("UPGRADER_LEASE_DURATION_SECONDS", "number"), env={"UPGRADER_LEASE_DURATION_SECONDS": "abc"}),
    Case("env-metrics-port-99999", "environment", ("run", "--kubeconfig", K),
         ("UPGRADER_METRICS_PORT", "65535"), env={"UPGRADER_METRICS_PORT": "99999"}),
    Case("env-namespace-empty-pause", "environment", ("pause", "--kubeconfig", K),
         ("UPGRADER_NAMESPACE",), env={"UPGRADER_NAMESPACE": ""}),
    Case("env-daemonset-selector-garbage", "environment", (*PLAN_GOOD[:4],),
         ("UPGRADER_DRIVER_DAEMONSET_SELECTOR='app in ('", "invalid label selector"),
         env={"UPGRADER_DRIVER_DAEMONSET_SELECTOR": "app in ("}),
    Case("env-pod-selector-garbage-run", "environment", ("run", "--once", "--kubeconfig", K),
         ("UPGRADER_DRIVER_POD_SELECTOR='app in ('", "invalid label selector"),
         env={"UPGRADER_DRIVER_POD_SELECTOR": "app in ("}),
    Case("env-requeue-inf", "environment", ("run", "--kubeconfig", K), ("UPGRADER_REQUEUE_SECONDS='inf'", "finite"),
         env={"UPGRADER_REQUEUE_SECONDS": "inf"}),
    Case("env-lease-nan", "environment", ("run", "--kubeconfig", K), ("UPGRADER_LEASE_DURATION_SECONDS='nan'",),
         env={"UPGRADER_LEASE_DURATION_SECONDS": "nan"}),
    Case("env-identity-two-lines", "environment", ("run", "--kubeconfig", K),
         ("UPGRADER_IDENTITY='a\\nb'", "one line"), env={"UPGRADER_IDENTITY": "a\nb"}),
    Case("env-status-configmap-path", "environment", ("pause", "--kubeconfig", K),
         ("UPGRADER_STATUS_CONFIGMAP='../secrets'", "not an object name"),
         env={"UPGRADER_STATUS_CONFIGMAP": "../secrets"}),
    Case("env-event-namespace-capitals", "environment", ("run", "--once", "--kubeconfig", K),
         ("UPGRADER_EVENT_NAMESPACE='Default'", "not a namespace name"), env={"UPGRADER_EVENT_NAMESPACE": "Default"}),
    Case("env-driver-namespace-slash-live-plan", "environment", ("plan", "--dry-run", "--kubeconfig", K),
         ("UPGRADER_DRIVER_NAMESPACE='gpu-operator/pods'", "not a namespace name"),
         env={"UPGRADER_DRIVER_NAMESPACE": "gpu-operator/pods"}),
    Case("env-log-format-xml", "environment", ("run", "--once", "--kubeconfig", K),
         ("UPGRADER_LOG_FORMAT='xml'", "expected text or json"), env={"UPGRADER_LOG_FORMAT": "xml"}),
    Case("run-log-format-xml", "arguments", ("run", "--kubeconfig", K, "--log-format", "xml"),
         ("--log-format", "'xml'")),
    # The rollout's name is a request path segment too.
    Case("pause-rollout-slash", "arguments", ("pause", "--kubeconfig", K, "--rollout", "a/b"),
         ("--rollout='a/b'", "not an object name")),
    Case("env-rollout-slash-status", "environment", ("status", "--kubeconfig", K),
         ("UPGRADER_ROLLOUT='../x'", "not an object name"), env={"UPGRADER_ROLLOUT": "../x"}),
    Case("run-rollout-and-policy", "arguments",
         ("run", "--kubeconfig", K, "--rollout", "default", "--policy", POLICY_FILE), ("--policy", "give one")),
    # A namespace is a request path segment: `-n a/b` used to PATCH /api/v1/namespaces/a/b/configmaps/...
    Case("pause-namespace-slash", "arguments", ("pause", "--kubeconfig", K, "-n", "a/b"),
         ("--namespace='a/b'", "not a namespace name")),
    Case("resume-namespace-space", "arguments", ("resume", "--kubeconfig", K, "-n", "Bad NS"),
         ("--namespace='Bad NS'", "not a namespace name")),
    Case("run-once-namespace-too-long", "arguments", ("run", "--once", "--kubeconfig", K, "-n", "x" * 64),
         ("--namespace=", "at most 63")),
]

CORPUS: list[Case] = [*_policy_cases(), *_list_cases(), *PLAN_INPUTS, *_kubeconfig_cases(), *ARGS]

# A sample run as real processes: a real terminal gets one line, no traceback.
SUBPROCESS_SAMPLE = [
    "policy-run-drain-timeout-string",
    "policy-plan-yaml-tab-indent",
    "list-label-value-number",
    "list-truncated-real-fleet-half",
    "list-nested-million-brackets",
    "kubeconfig-status-tabs",
    "kubeconfig-run-once-context-nope",
    "env-lease-abc",
    "serve-nodes-2-with-audit-log",
    "compat-floor-bad-version",
]
