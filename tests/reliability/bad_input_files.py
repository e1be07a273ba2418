"""The bad-input campaign's case model (Case, the argv tokens) and its bad files: policies for
`run --once` and `plan`, and kubectl Lists for `plan --dry-run --from-file`."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

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


def _first(kind: str, path: str, value: Any, named: str = "") -> FleetEdit:
    """The good fleet with `path` (dotted, `containers.0` indexes a list) of its first `kind` (whose name
    starts with `named`) set to `value`."""

    def edit(fleet: dict[str, Any]) -> str:
        fleet = copy.deepcopy(fleet)
        node: Any = next(item for item in fleet["items"]
                         if item["kind"] == kind and item["metadata"]["name"].startswith(named))
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
    # The driver's own objects (the device plugin's DaemonSet sorts first, and plan reads only drivers').
    ("revision-not-a-number", _first("ControllerRevision", "revision", "two", named="nvidia-driver"),
     ("(ControllerRevision ", "revision that is str 'two', expected an integer")),
    ("daemonset-template-a-string", _first("DaemonSet", "spec.template", "nvidia-driver", named="nvidia-driver"),
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
