"""The bad-input campaign ("Prove it holds"): every entry of CORPUS is fed to the real CLI.

Project rule: bad input (policy, labels, files, flags) gets a one-line error naming what is wrong
and exit code 2, never a traceback, never a write. For each case this proves:

- exit code 2;
- stderr is exactly one line, starting `upgrader: error: `, holding the case's expected words
  (the field path, the file, the item index, the flag);
- nothing on stdout, no `Traceback`;
- no request at all reaches the emulated cluster that every cluster command is pointed at (bad
  input is refused before connecting), hence no write; and no file appears or changes.

Every case runs in-process through `upgrader.commands.cli.main`; a sample also runs as a real subprocess.
`python -m pytest tests/reliability/test_bad_input.py -s` prints the corpus size by category.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from upgrader.commands.cli import main
from upgrader.sim.cluster import EmulatedCluster
from upgrader.sim.fleets.scenarios import build

# Tokens in a case's argv and expected words, replaced when it runs.
K = "{KUBECONFIG}"  # the emulated cluster's kubeconfig: every cluster command gets it
F = "{FILE}"  # the case's own input file (absent when the case has no content: "missing file")
GOOD = "{GOOD_LIST}"  # a well-formed kubectl List of the emulated fleet
TMP = "{TMP}"  # the case's own directory

FleetEdit = Callable[[dict[str, Any]], "str | bytes"]
Content = str | bytes | FleetEdit | None


class EmptyDir:
    """Content marker: the case's FILE is an empty directory."""


@dataclass(frozen=True)
class Case:
    id: str
    category: str
    argv: tuple[str, ...]
    expect: tuple[str, ...]  # words the one error line must hold
    content: Content | EmptyDir = None
    name: str = "input"  # FILE's name in the case's directory
    env: Mapping[str, str] = field(default_factory=dict)


# ----- policies: `run --once` against the cluster and `plan --from-file`, one case each ----------

RUN_ONCE = ("run", "--once", "--kubeconfig", K, "--policy", F)
PLAN_GOOD = ("plan", "--dry-run", "--from-file", GOOD, "--policy", F)

POLICIES: list[tuple[str, Content | EmptyDir, tuple[str, ...]]] = [
    ("max-parallel-string", "maxParallelUpgrades: two\n", ("maxParallelUpgrades", "integer")),
    ("max-parallel-negative", "maxParallelUpgrades: -1\n", ("maxParallelUpgrades", "greater than or equal to 0")),
    ("max-parallel-float", "maxParallelUpgrades: 1.5\n", ("maxParallelUpgrades",)),
    ("max-unavailable-fraction-percent", 'maxUnavailable: "0.5%"\n', ("maxUnavailable", "'0.5%'")),
    ("max-unavailable-101-percent", 'maxUnavailable: "101%"\n', ("maxUnavailable", "between 0% and 100%")),
    ("max-unavailable-150-percent", 'maxUnavailable: "150%"\n', ("maxUnavailable", "150%")),
    ("max-unavailable-minus-1", 'maxUnavailable: "-1"\n', ("maxUnavailable", "'-1'")),
    ("max-unavailable-abc", "maxUnavailable: abc\n", ("maxUnavailable", "'abc'")),
    ("max-unavailable-int-minus-3", "maxUnavailable: -3\n", ("maxUnavailable", "must not be negative")),
    ("drain-every-node-without-drain", "drainEveryNode: true\n", ("drainEveryNode", "drain.enable")),
    ("drain-every-node-string", 'drainEveryNode: "yes"\n', ("drainEveryNode",)),
    ("max-unavailable-true", "maxUnavailable: true\n", ("maxUnavailable", "percentage")),
    ("max-unavailable-list", "maxUnavailable: [1]\n", ("maxUnavailable",)),
    ("auto-upgrade-int", "autoUpgrade: 1\n", ("autoUpgrade", "boolean")),
    ("auto-upgrade-string", 'autoUpgrade: "yes"\n', ("autoUpgrade", "boolean")),
    ("gpu-pod-deletion-force-int", "gpuPodDeletion:\n  force: 1\n", ("gpuPodDeletion.force", "boolean")),
    ("drain-timeout-string", 'drain:\n  timeoutSeconds: "300"\n', ("drain.timeoutSeconds", "integer")),
    ("drain-timeout-float", "drain:\n  timeoutSeconds: 1.5\n", ("drain.timeoutSeconds", "integer")),
    ("drain-timeout-negative", "drain:\n  timeoutSeconds: -5\n", ("drain.timeoutSeconds", "greater than or equal")),
    ("drain-timeout-bool", "drain:\n  timeoutSeconds: false\n", ("drain.timeoutSeconds", "integer")),
    ("wait-timeout-float", "waitForCompletion:\n  timeoutSeconds: 30.0\n", ("waitForCompletion.timeoutSeconds",)),
    ("validation-timeout-zero", "validation:\n  timeoutSeconds: 0\n", ("validation.timeoutSeconds",)),
    ("pod-restart-timeout-negative", "podRestart:\n  timeoutSeconds: -1\n", ("podRestart.timeoutSeconds",)),
    ("soak-negative", "failureDomains:\n  soakSeconds: -60\n", ("failureDomains.soakSeconds",)),
    ("drain-is-a-list", "drain: [enable]\n", ("drain", "dictionary")),
    ("failure-domains-is-a-string", "failureDomains: zone\n", ("failureDomains", "dictionary")),
    ("unknown-top-level-key", "maxUnavaliable: 1\n", ("maxUnavaliable", "unknown key")),
    ("unknown-nested-drain-enabled", "drain:\n  enabled: true\n", ("drain.enabled", "unknown key")),
    ("unknown-nested-canaryy", "failureDomains:\n  canaryy: us-east-1a\n", ("failureDomains.canaryy", "unknown key")),
    ("wait-selector-equals", 'waitForCompletion:\n  podSelector: "=="\n', ("waitForCompletion.podSelector",)),
    ("drain-selector-open-in", 'drain:\n  enable: true\n  podSelector: "app in ("\n', ("drain.podSelector",)),
    ("validation-selector-bang", 'validation:\n  podSelector: "!"\n', ("validation.podSelector",)),
    ("label-key-empty", 'failureDomains:\n  labelKey: ""\n', ("failureDomains.labelKey",)),
    # Label keys as Kubernetes validates them (issue 11): a key no node label can have is a typo.
    ("label-key-space", 'failureDomains:\n  labelKey: "Zone Key"\n',
     ("failureDomains.labelKey", "not a valid label key 'Zone Key'", "name part must consist of")),
    ("label-key-two-slashes", "failureDomains:\n  labelKey: a/b/c\n",
     ("failureDomains.labelKey", "'a/b/c'", "one '/'")),
    ("label-key-name-64", f"failureDomains:\n  labelKey: example.com/{'z' * 64}\n",
     ("failureDomains.labelKey", "name part must be no more than 63 characters")),
    ("label-key-leading-dash", "failureDomains:\n  labelKey: -bad\n",
     ("failureDomains.labelKey", "'-bad'", "start and end with a letter or digit")),
    ("label-key-capital-prefix", "failureDomains:\n  labelKey: Topology.k8s.io/zone\n",
     ("failureDomains.labelKey", "prefix part must be a DNS subdomain")),
    ("order-value-space", "failureDomains:\n  order: [us-east-1a, us east]\n",
     ("failureDomains.order.1", "not a valid label value 'us east'")),
    ("canary-value-65", f"failureDomains:\n  canary: {'z' * 65}\n",
     ("failureDomains.canary", "no more than 63 characters")),
    ("selector-key-double-dot", "drain:\n  podSelector: a..b/app=x\n",
     ("drain.podSelector", "label key 'a..b/app'", "prefix part")),
    # Bounds (issue 11): nesting, and size checked before parsing.
    ("nested-million-brackets", "drain: " + "[" * 10**6 + "\n", ("nested deeper than 64 levels at line 1",)),
    ("larger-than-1-mib", "maxParallelUpgrades: 2\n" + "#" * 2**20 + "\n",
     ("larger than the limit of 1 MiB", "1,048,600 bytes")),
    ("order-duplicates", "failureDomains:\n  order: [us-east-1a, us-east-1b, us-east-1a]\n",
     ("failureDomains.order", "twice", "us-east-1a")),
    ("order-not-a-list", "failureDomains:\n  order: us-east-1a\n", ("failureDomains.order",)),
    ("on-blocked-timeout-explode", "onBlockedTimeout: explode\n", ("onBlockedTimeout", "'halt' or 'fail'")),
    ("on-node-failure-int", "onNodeFailure: 3\n", ("onNodeFailure",)),
    ("yaml-tab-indent", "drain:\n\tenable: true\n", ("not valid YAML at line 2",)),
    ("yaml-unclosed-bracket", "failureDomains: {order: [us-east-1a, us-east-1b}\n", ("not valid YAML",)),
    ("yaml-list-top-level", "- maxUnavailable: 1\n- drain: {}\n", ("must be a mapping", "list")),
    ("yaml-scalar-top-level", "just some words\n", ("must be a mapping", "str")),
    ("binary-file", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe", ("not UTF-8 text",)),
    ("empty-directory", EmptyDir(), ("is a directory",)),
    ("missing-file", None, ("no such file",)),
    ("driver-wrapper-extra-key", "driver:\n  upgradePolicy:\n    maxParallelUpgrades: 2\n  extra: 1\n",
     ("driver.extra", "unknown key")),
    ("upgrade-policy-not-a-map", "upgradePolicy: 5\n", ("upgradePolicy", "mapping")),
    ("pasted-upgrade-policy-bad-field", "upgradePolicy:\n  drain:\n    timeoutSeconds: soon\n",
     ("drain.timeoutSeconds",)),
]


def _policy_cases() -> Iterator[Case]:
    for ident, content, words in POLICIES:
        yield Case(f"policy-run-{ident}", "policy", RUN_ONCE, (F, *words), content, "policy.yaml")
        yield Case(f"policy-plan-{ident}", "policy", PLAN_GOOD, (F, *words), content, "policy.yaml")


# ----- kubectl Lists for `plan --dry-run --from-file` ----------------------------------------------

PLAN_FILE = ("plan", "--dry-run", "--from-file", F)
NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-a-01", "labels": {"a": "b"}},
        "spec": {}, "status": {}}


def _listing(*items: Any) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": [NODE, *items]})


def _node(**changes: Any) -> dict[str, Any]:
    return {**NODE, "metadata": {"name": "gpu-x"}, **changes}


def _insert(index: int, item: Any) -> FleetEdit:
    """The good fleet with `item` inserted at `index` (the real list around the bad item)."""

    def edit(fleet: dict[str, Any]) -> str:
        items = list(fleet["items"])
        items.insert(index, item)
        return json.dumps({**fleet, "items": items})

    return edit


def _first(kind: str, path: str, value: Any) -> FleetEdit:
    """The good fleet with `path` (dotted, `containers.0` indexes a list) of its first `kind` set to `value`."""

    def edit(fleet: dict[str, Any]) -> str:
        fleet = copy.deepcopy(fleet)
        node: Any = next(item for item in fleet["items"] if item["kind"] == kind)
        *parents, last = path.split(".")
        for part in parents:
            node = node[int(part)] if part.isdigit() else node[part]
        node[last] = value
        return json.dumps(fleet)

    return edit


def _truncated(fraction: float) -> FleetEdit:
    def edit(fleet: dict[str, Any]) -> str:
        text = json.dumps(fleet, indent=1)
        return text[: int(len(text) * fraction)]

    return edit


SMALL = _listing()
LISTS: list[tuple[str, Content | EmptyDir, tuple[str, ...]]] = [
    ("truncated-json-1-char", SMALL[:1], ("not valid JSON", "truncated")),
    ("truncated-json-in-key", SMALL[:20], ("not valid JSON", "truncated")),
    ("truncated-json-in-item", SMALL[: SMALL.index("gpu-a-01") + 4], ("not valid JSON", "truncated")),
    ("truncated-json-last-brace", SMALL[:-1], ("not valid JSON", "truncated")),
    ("truncated-real-fleet-half", _truncated(0.5), ("not valid JSON", "truncated")),
    ("truncated-real-fleet-99", _truncated(0.99), ("not valid JSON", "truncated")),
    ("truncated-yaml", "apiVersion: v1\nkind: List\nitems:\n- kind: Node\n  metadata: {name: gpu-a-01, labels: {a: b",
     ("not valid JSON or YAML", "truncated")),
    ("json-array", json.dumps([NODE]), ("expected a kubectl List", "items")),
    ("yaml-scalar", "nodes and pods\n", ("expected a kubectl List",)),
    ("items-not-a-list", json.dumps({"kind": "List", "items": NODE}), ("expected a kubectl List", "items")),
    ("item-not-an-object", _listing(5), ("item 1", "not an object")),
    ("item-without-kind", _listing({"metadata": {"name": "x"}}), ("item 1", "no kind")),
    ("item-kind-5", _listing({"kind": 5, "metadata": {"name": "x"}}), ("item 1", "kind", "not a string")),
    ("metadata-not-a-map", _listing(_node(metadata="gpu-x")), ("item 1 (Node)", "metadata", "not a map")),
    ("metadata-name-missing", _listing(_node(metadata={})), ("item 1 (Node)", "metadata.name")),
    ("metadata-name-number", _listing(_node(metadata={"name": 7})), ("item 1 (Node)", "metadata.name")),
    ("labels-not-a-map", _listing(_node(metadata={"name": "gpu-x", "labels": ["a=b"]})),
     ("item 1 (Node gpu-x)", "metadata.labels", "not a map")),
    ("label-value-number", _insert(2, _node(metadata={"name": "gpu-x", "labels": {"nvidia.com/gpu.count": 8}})),
     ("item 2 (Node gpu-x)", "nvidia.com/gpu.count", "not a string")),
    ("label-value-list", _listing(_node(metadata={"name": "gpu-x", "labels": {"zone": ["a", "b"]}})),
     ("item 1 (Node gpu-x)", "'zone'", "not a string")),
    ("label-value-null-yaml", "items:\n- kind: Node\n  metadata:\n    name: gpu-x\n    labels:\n      zone:\n",
     ("item 0 (Node gpu-x)", "'zone'", "not a string")),
    ("label-value-bool-yaml", "items:\n- kind: Node\n  metadata:\n    name: gpu-x\n    labels: {gpu: true}\n",
     ("item 0 (Node gpu-x)", "'gpu'", "not a string")),
    ("label-key-number-yaml", "items:\n- kind: Node\n  metadata:\n    name: gpu-x\n    labels: {5: x}\n",
     ("item 0 (Node gpu-x)", "label key 5", "not a string")),
    ("annotation-value-number", _listing(_node(metadata={"name": "gpu-x", "annotations": {"n": 1}})),
     ("item 1 (Node gpu-x)", "annotation 'n'", "not a string")),
    ("pod-label-value-number", _insert(3, {"kind": "Pod", "metadata": {"name": "p", "namespace": "ml",
                                                                      "labels": {"app": 1}}}),
     ("item 3 (Pod p)", "'app'", "not a string")),
    ("api-version-number", _listing(_node(apiVersion=1)), ("item 1 (Node gpu-x)", "apiVersion", "not a string")),
    ("namespace-not-a-string", _listing({"kind": "Pod", "metadata": {"name": "p", "namespace": ["ml"]}}),
     ("item 1 (Pod p)", "metadata.namespace", "not a string")),
    ("node-spec-a-list", _insert(1, _node(spec=["unschedulable"])), ("item 1 (Node gpu-x)", "spec", "not a map")),
    ("node-status-a-string", _listing(_node(status="Ready")), ("item 1 (Node gpu-x)", "status", "not a map")),
    ("pod-spec-a-string", _listing({"kind": "Pod", "metadata": {"name": "p"}, "spec": "x"}),
     ("item 1 (Pod p)", "spec", "not a map")),
    # Deeper fields of the wrong JSON type: named by their path once reading the file failed.
    ("node-node-info-a-number", _insert(2, _node(status={"nodeInfo": 5})),
     ("item 2 (Node gpu-x)", "status.nodeInfo that is int, expected a map")),
    ("pod-containers-a-number", _insert(2, {"kind": "Pod", "metadata": {"name": "p", "namespace": "ml"},
                                            "spec": {"nodeName": "gpu-a-01", "containers": 5}}),
     ("item 2 (Pod ml/p)", "spec.containers that is int, expected a list")),
    ("pod-resources-a-list", _first("Pod", "spec.containers.0.resources", ["nvidia.com/gpu"]),
     ("(Pod ", "spec.containers[0].resources that is list, expected a map")),
    ("pdb-disruptions-allowed-string", _first("PodDisruptionBudget", "status.disruptionsAllowed", "one"),
     ("(PodDisruptionBudget ", "status.disruptionsAllowed that is str 'one', expected an integer")),
    ("revision-not-a-number", _first("ControllerRevision", "revision", "two"),
     ("(ControllerRevision ", "revision that is str 'two', expected an integer")),
    ("daemonset-template-a-string", _first("DaemonSet", "spec.template", "nvidia-driver"),
     ("(DaemonSet ", "spec.template that is str, expected a map")),
    ("nvidiadriver-default-yes", _insert(2, {"apiVersion": "nvidia.com/v1alpha1", "kind": "NVIDIADriver",
                                             "metadata": {"name": "default"}, "spec": {"default": "yes"}}),
     ("item 2 (NVIDIADriver default)", "spec.default that is str 'yes', expected a boolean")),
    ("garbage-bytes", bytes(range(256)) * 4, ("not valid JSON or YAML",)),
    # Nesting (issue 11): a million `[` was a RecursionError traceback.
    ("nested-million-brackets", "[" * 10**6, ("nested too deeply", "1,000 levels")),
    ("nested-in-items", '{"kind": "List", "items": ' + "[" * 5000 + "]" * 5000 + "}", ("nested too deeply",)),
    ("yaml-nested-deep", "items: " + "[" * 10**5 + "\n", ("nested too deeply",)),
    ("garbage-bytes-json-start", b"{\xff\xfe\x00garbage", ("not UTF-8 text",)),
    ("empty-file", "", ("expected a kubectl List",)),
    ("no-nodes", json.dumps({"kind": "List", "items": [{"kind": "Pod", "metadata": {"name": "p"}}]}),
     ("no Node objects",)),
    ("no-items-at-all", json.dumps({"kind": "List", "items": []}), ("no Node objects",)),
    ("directory", EmptyDir(), ("is a directory",)),
    ("missing-file", None, ("no such file",)),
]


def _list_cases() -> Iterator[Case]:
    for ident, content, words in LISTS:
        yield Case(f"list-{ident}", "kubectl-list", PLAN_FILE, (f"--from-file {F}", *words), content, "fleet.json")


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


# ----- the emulated cluster every cluster command is pointed at ------------------------------------


@dataclass
class Target:
    cluster: EmulatedCluster
    kubeconfig: Path
    good_list: Path
    fleet: dict[str, Any]
    writes_before: int


LIST_KINDS = [("nodes", "", "v1"), ("pods", "", "v1"), ("poddisruptionbudgets", "policy", "v1"),
              ("daemonsets", "apps", "v1"), ("controllerrevisions", "apps", "v1"), ("jobs", "batch", "v1"),
              ("nvidiadrivers", "nvidia.com", "v1alpha1")]


def _writes(cluster: EmulatedCluster) -> list[Any]:
    return [r for r in cluster.requests if r.method not in ("GET",)]


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    base = tmp_path_factory.mktemp("cluster")
    cluster = EmulatedCluster()
    build(cluster, "healthy")
    cluster.serve()
    kubeconfig = cluster.write_kubeconfig(base / "kubeconfig")
    items = []
    for plural, group, version in LIST_KINDS:
        items.extend(cluster.store.list(cluster.type(plural, group, version)).items)
    fleet = {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": items}
    good_list = base / "fleet.json"
    good_list.write_text(json.dumps(fleet))
    try:
        yield Target(cluster, kubeconfig, good_list, fleet, len(_writes(cluster)))
    finally:
        cluster.stop()


def _materialise(case: Case, directory: Path, target: Target) -> dict[str, str]:
    path = directory / case.name
    content = case.content
    if isinstance(content, EmptyDir):
        path.mkdir()
    elif callable(content):
        content = content(target.fleet)
    if isinstance(content, str):
        path.write_text(content, encoding="utf-8")
    elif isinstance(content, bytes):
        path.write_bytes(content)
    return {K: str(target.kubeconfig), F: str(path), GOOD: str(target.good_list), TMP: str(directory)}


def _fill(text: str, tokens: Mapping[str, str]) -> str:
    for token, value in tokens.items():
        text = text.replace(token, value)
    return text


def _files(directory: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(directory)): (p.read_bytes() if p.is_file() else None) for p in directory.rglob("*")}


def _check(case: Case, code: int | str | None, out: str, err: str, tokens: Mapping[str, str]) -> None:
    shown = f"{case.id}: exit {code}, stdout {out!r}, stderr {err!r}"
    assert "Traceback" not in err + out, shown
    assert code == 2, shown
    assert err.startswith("upgrader: error: "), shown
    assert err.endswith("\n") and err.count("\n") == 1, shown
    for words in case.expect:
        assert _fill(words, tokens) in err, f"{shown}: expected {_fill(words, tokens)!r}"
    assert out == "", shown


def _clean_env(monkeypatch: pytest.MonkeyPatch, env: Mapping[str, str]) -> None:
    for name in list(os.environ):
        if name.startswith("UPGRADER_") or name == "KUBECONFIG":
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)


def _guard_long_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Input accepted by mistake must fail the case, not run a controller, demo or server for ever."""

    def reached(what: str) -> Callable[..., Any]:
        def fail(*args: Any, **kwargs: Any) -> Any:
            raise AssertionError(f"bad input was accepted: {what} started")

        return fail

    monkeypatch.setattr("upgrader.controller.runner.run_until_signalled", reached("the controller loop"))
    monkeypatch.setattr("upgrader.commands.demo.run_demo", reached("the demo"))
    monkeypatch.setattr(EmulatedCluster, "serve", reached("an emulated cluster's server"))


def test_the_fleet_and_the_cluster_are_good(target: Target, capsys: pytest.CaptureFixture[str]) -> None:
    """Controls: the good list plans cleanly, and the request log sees what the kubeconfig sends."""
    assert main(["plan", "--dry-run", "--from-file", str(target.good_list), "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["summary"]["to_upgrade"] == 6
    before = len(target.cluster.requests)
    assert main(["plan", "--dry-run", "--kubeconfig", str(target.kubeconfig), "-o", "json"]) == 0
    capsys.readouterr()
    assert len(target.cluster.requests) > before, "requests through this kubeconfig are seen"


@pytest.mark.parametrize("case", CORPUS, ids=[c.id for c in CORPUS])
def test_bad_input_is_one_line_exit_2_and_no_request(case: Case, target: Target, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    tokens = _materialise(case, tmp_path, target)
    _clean_env(monkeypatch, case.env)
    _guard_long_runs(monkeypatch)
    files = _files(tmp_path)
    requests = len(target.cluster.requests)
    capsys.readouterr()
    try:
        code: int | str | None = main([_fill(a, tokens) for a in case.argv])
    except SystemExit as exc:  # argparse
        code = exc.code
    out, err = capsys.readouterr()
    _check(case, code, out, err, tokens)
    sent = target.cluster.requests[requests:]
    assert sent == [], f"{case.id}: bad input reached the cluster: {[(r.method, r.path) for r in sent]}"
    assert _files(tmp_path) == files, f"{case.id}: a file was written"


def test_a_sample_as_real_processes(target: Target, tmp_path: Path) -> None:
    executable = Path(sys.executable).with_name("upgrader")
    cases = [c for c in CORPUS if c.id in SUBPROCESS_SAMPLE]
    assert len(cases) == len(SUBPROCESS_SAMPLE)
    env = {k: v for k, v in os.environ.items() if not k.startswith("UPGRADER_") and k != "KUBECONFIG"}
    requests = len(target.cluster.requests)
    running = []
    for case in cases:
        directory = tmp_path / case.id
        directory.mkdir()
        tokens = _materialise(case, directory, target)
        process = subprocess.Popen([str(executable), *(_fill(a, tokens) for a in case.argv)], env={**env, **case.env},
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        running.append((case, tokens, directory, _files(directory), process))
    for case, tokens, directory, files, process in running:
        out, err = process.communicate(timeout=60)
        _check(case, process.returncode, out, err, tokens)
        assert _files(directory) == files, f"{case.id}: a file was written"
    assert target.cluster.requests[requests:] == []


def test_no_write_reached_the_cluster_and_the_corpus_is_big_enough(target: Target) -> None:
    assert len(_writes(target.cluster)) == target.writes_before
    by_category = Counter(c.category for c in CORPUS)
    print(f"\nbad-input corpus: {len(CORPUS)} cases: "
          + ", ".join(f"{name} {count}" for name, count in sorted(by_category.items())))
    assert len({c.id for c in CORPUS}) == len(CORPUS)
    assert len(CORPUS) >= 60


# ----- the boundary: garbage in well-formed labels is a finding (exit 1), not bad input ----------


def _relabel(fleet: dict[str, Any], node: str, labels: Mapping[str, str]) -> dict[str, Any]:
    items = []
    for item in fleet["items"]:
        if item["kind"] == "Node" and item["metadata"]["name"] == node:
            meta = item["metadata"]
            item = {**item, "metadata": {**meta, "labels": {**meta["labels"], **labels}}}
        items.append(item)
    return {**fleet, "items": items}


@pytest.mark.parametrize(("labels", "words"), [
    ({"nvidia.com/cuda.driver.major": "abc"}, "not a version"),
    ({"nvidia.com/gpu-driver-upgrade-state": "half-done"}, "unknown upgrade state"),
    ({"feature.node.kubernetes.io/kernel-version.full": "unknown kernel"}, "kernel"),
], ids=["driver-major-abc", "state-half-done", "kernel-garbage"])
def test_garbage_in_well_formed_labels_is_a_finding_not_bad_input(
        labels: dict[str, str], words: str, target: Target, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    listing = tmp_path / "fleet.json"
    listing.write_text(json.dumps(_relabel(target.fleet, "gpu-b-01", labels)))
    capsys.readouterr()
    code = main(["plan", "--dry-run", "--from-file", str(listing), "-o", "json"])
    out, err = capsys.readouterr()
    assert (code, err) == (1, "")
    invalid = [f for f in json.loads(out)["findings"] if f["kind"] == "invalid-node-data"]
    assert [f["node"] for f in invalid] == ["gpu-b-01"]
    assert words in invalid[0]["message"]

