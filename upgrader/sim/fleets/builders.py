"""The objects a GPU fleet is built from: nodes, driver and validator DaemonSets, pods; and the
GPU Operator's part installed into a cluster (`install_operator`).

Shared by the scenarios and the large generated fleets, so both look the same to the controller:
node labels as GPU Feature Discovery and Node Feature Discovery set them, the GPU Operator's
precompiled driver DaemonSets (one per kernel, images `<branch>-<kernel>-<os>`), and workload pods.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from upgrader.core.model.gpupods import NVIDIA_DRA_DRIVER
from upgrader.core.model.views import DIGEST_ENV
from upgrader.sim.controllers.admission import DEVICE_PLUGIN_APP, DEVICE_PLUGIN_LABEL
from upgrader.sim.controllers.driver import compute_config_digest
from upgrader.sim.controllers.settings import DRIVER_COMPONENT, DRIVER_COMPONENT_LABEL, GPU, VALIDATOR_APP
from upgrader.sim.fleets.catalog import ZONES as ZONES  # re-exported: the fleets build in these zones

if TYPE_CHECKING:
    from upgrader.sim.cluster import EmulatedCluster

Obj = dict[str, Any]

OPERATOR_NS = "gpu-operator"
DRIVER_REPO = "nvcr.io/nvidia/driver"
OLD_DRIVER = "535.161.08"
NEW_DRIVER = "550.90.07"
OS_TAG = "ubuntu22.04"
KERNELS = ("5.15.0-105-generic", "5.15.0-113-generic")
PRODUCTS = ("NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB")
GPUS_PER_NODE = 8


def driver_tag(version: str, kernel: str, os_tag: str = OS_TAG) -> str:
    """The precompiled driver image tag: `<branch>-<kernel>-<os>`."""
    return f"{version.split('.')[0]}-{kernel}-{os_tag}"


def node_object(name: str, zone: str, kernel: str, product: str, index: int) -> Obj:
    major, minor, rev = OLD_DRIVER.split(".")
    kmaj, kmin, krest = kernel.split(".", 2)
    return {
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "node.kubernetes.io/instance-type": "p5.48xlarge" if "H100" in product else "p4d.24xlarge",
                "topology.kubernetes.io/region": "us-east-1",
                "topology.kubernetes.io/zone": zone,
                "nvidia.com/gpu.present": "true",
                "nvidia.com/gpu.deploy.driver": "true",
                "nvidia.com/gpu.deploy.operator-validator": "true",
                "nvidia.com/gpu.deploy.device-plugin": "true",
                "nvidia.com/gpu.product": product,
                "nvidia.com/gpu.count": str(GPUS_PER_NODE),
                "nvidia.com/gpu.memory": "81559",
                "nvidia.com/cuda.driver.major": major,
                "nvidia.com/cuda.driver.minor": minor,
                "nvidia.com/cuda.driver.rev": rev,
                "nvidia.com/cuda.runtime.major": "12",
                "nvidia.com/cuda.runtime.minor": "2",
                "feature.node.kubernetes.io/kernel-version.full": kernel,
                "feature.node.kubernetes.io/kernel-version.major": kmaj,
                "feature.node.kubernetes.io/kernel-version.minor": kmin,
                "feature.node.kubernetes.io/kernel-version.revision": krest.split("-")[0],
                "feature.node.kubernetes.io/system-os_release.ID": "ubuntu",
                "feature.node.kubernetes.io/system-os_release.VERSION_ID": "22.04",
            },
        },
        "spec": {"podCIDR": f"10.244.{index}.0/24"},
        "status": {
            "capacity": {"cpu": "192", "memory": "2097152Mi", "pods": "110", GPU: str(GPUS_PER_NODE)},
            "allocatable": {"cpu": "190", "memory": "2080000Mi", "pods": "110", GPU: str(GPUS_PER_NODE)},
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "kubelet is posting ready status",
                }
            ],
            "addresses": [
                {"type": "InternalIP", "address": f"10.0.{index // 250}.{index % 250 + 2}"},
                {"type": "Hostname", "address": name},
            ],
            "nodeInfo": {
                "kernelVersion": kernel,
                "osImage": "Ubuntu 22.04.4 LTS",
                "kubeletVersion": "v1.32.4",
                "containerRuntimeVersion": "containerd://1.7.20",
                "architecture": "amd64",
                "operatingSystem": "linux",
            },
        },
    }


CLUSTER_POLICY = "cluster-policy"
CLUSTER_POLICY_UID = "uid-cluster-policy"


def driver_daemonset(kernel: str, version: str) -> Obj:
    name = f"nvidia-driver-daemonset-{kernel}-{OS_TAG}"
    labels = {"app": "nvidia-driver-daemonset", "nvidia.com/precompiled": "true"}
    # Owned by the ClusterPolicy, as the GPU Operator's driver DaemonSets are.
    owner = {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "name": CLUSTER_POLICY,
             "uid": CLUSTER_POLICY_UID, "controller": True, "blockOwnerDeletion": True}
    return {
        "metadata": {
            "name": name,
            "labels": {**labels, DRIVER_COMPONENT_LABEL: DRIVER_COMPONENT},
            "ownerReferences": [owner],
        },
        "spec": {
            "selector": {
                "matchLabels": {
                    "app": "nvidia-driver-daemonset",
                    "feature.node.kubernetes.io/kernel-version.full": kernel,
                }
            },
            "updateStrategy": {"type": "OnDelete"},
            "template": driver_template(kernel, version),
        },
    }


def with_mig(node: Obj, profile: str = "1g.10gb", slices: int = 7, partitioned_gpus: int = 1) -> Obj:
    """`node` with `partitioned_gpus` of its GPUs split into MIG slices (GFD's mixed strategy): each
    such GPU leaves `nvidia.com/gpu` and gives `slices` of `nvidia.com/mig-<profile>`."""
    status = node["status"]
    for side in ("capacity", "allocatable"):
        amounts = status[side]
        amounts[GPU] = str(int(amounts.get(GPU, "0")) - partitioned_gpus)
        amounts[f"nvidia.com/mig-{profile}"] = str(slices * partitioned_gpus)
    labels = node["metadata"]["labels"]
    labels.update({"nvidia.com/mig.strategy": "mixed", "nvidia.com/mig.capable": "true"})
    labels["nvidia.com/mig.config"] = f"all-{profile}"
    return node


def driver_template(kernel: str, version: str) -> Obj:
    """The driver pod template as the GPU Operator renders it, DRIVER_CONFIG_DIGEST included."""
    return operator_render(_driver_template(kernel, version))


def operator_render(template: Obj) -> Obj:
    """Set DRIVER_CONFIG_DIGEST on the driver containers from their install-relevant configuration,
    as the GPU Operator does whenever it renders the driver DaemonSet."""
    digest = compute_config_digest(template)
    for container in (template.get("spec") or {}).get("containers") or []:
        env = [e for e in container.get("env") or [] if e.get("name") != DIGEST_ENV]
        container["env"] = [*env, {"name": DIGEST_ENV, "value": digest}]
    return template


def _driver_template(kernel: str, version: str) -> Obj:
    return {
        "metadata": {
            "labels": {
                "app": "nvidia-driver-daemonset",
                "nvidia.com/precompiled": "true",
                "feature.node.kubernetes.io/kernel-version.full": kernel,
            }
        },
        "spec": {
            "nodeSelector": {
                "nvidia.com/gpu.deploy.driver": "true",
                "feature.node.kubernetes.io/kernel-version.full": kernel,
            },
            "priorityClassName": "system-node-critical",
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "nvidia-driver-ctr",
                    "image": f"{DRIVER_REPO}:{driver_tag(version, kernel)}",
                    "env": [{"name": "DRIVER_VERSION", "value": version}],
                    "securityContext": {"privileged": True},
                }
            ],
        },
    }


def validator_daemonset() -> Obj:
    return {
        "metadata": {"name": VALIDATOR_APP, "labels": {"app": VALIDATOR_APP}},
        "spec": {
            "selector": {"matchLabels": {"app": VALIDATOR_APP}},
            "template": {
                "metadata": {"labels": {"app": VALIDATOR_APP}},
                "spec": {
                    "nodeSelector": {"nvidia.com/gpu.deploy.operator-validator": "true"},
                    "terminationGracePeriodSeconds": 1,
                    "containers": [
                        {
                            "name": "nvidia-operator-validator",
                            "image": "nvcr.io/nvidia/cloud-native/gpu-operator-validator:v24.6.0",
                        }
                    ],
                },
            },
        },
    }


def device_plugin_daemonset() -> Obj:
    """The GPU Operator's device plugin: while its pod runs on a node, the kubelet admits GPU pods there
    (sim/controllers/admission.py)."""
    return {
        "metadata": {"name": DEVICE_PLUGIN_APP, "labels": {"app": DEVICE_PLUGIN_APP}},
        "spec": {
            "selector": {"matchLabels": {"app": DEVICE_PLUGIN_APP}},
            "template": {
                "metadata": {"labels": {"app": DEVICE_PLUGIN_APP}},
                "spec": {
                    "nodeSelector": {DEVICE_PLUGIN_LABEL: "true"},
                    "terminationGracePeriodSeconds": 1,
                    "containers": [
                        {"name": "nvidia-device-plugin", "image": "nvcr.io/nvidia/k8s-device-plugin:v0.16.1"}
                    ],
                },
            },
        },
    }


def pod_object(
    name: str,
    node: str,
    labels: dict[str, str],
    image: str,
    gpus: int = 0,
    owner: tuple[str, str, str] | None = None,
    empty_dir: bool = False,
    annotations: dict[str, str] | None = None,
) -> Obj:
    resources: Obj = {"requests": {"cpu": "4", "memory": "16Gi"}}
    if gpus:
        resources["requests"][GPU] = str(gpus)
        resources["limits"] = {GPU: str(gpus)}
    spec: Obj = {
        "nodeName": node,
        "terminationGracePeriodSeconds": 1,
        "containers": [{"name": "main", "image": image, "resources": resources}],
    }
    if empty_dir:
        spec["volumes"] = [{"name": "scratch", "emptyDir": {}}]
        spec["containers"][0]["volumeMounts"] = [{"name": "scratch", "mountPath": "/scratch"}]
    metadata: Obj = {"name": name, "labels": labels, "annotations": annotations or {}}
    if owner:
        api_version, kind, owner_name = owner
        metadata["ownerReferences"] = [
            {
                "apiVersion": api_version,
                "kind": kind,
                "name": owner_name,
                "uid": f"uid-{kind.lower()}-{owner_name}",
                "controller": True,
            }
        ]
    return {
        "metadata": metadata,
        "spec": spec,
        "status": {
            "phase": "Running",
            "podIP": "10.244.0.10",
            "conditions": [
                {"type": "Ready", "status": "True"},
                {"type": "ContainersReady", "status": "True"},
            ],
            "containerStatuses": [
                {
                    "name": "main",
                    "image": image,
                    "ready": True,
                    "restartCount": 0,
                    "started": True,
                    "state": {"running": {}},
                }
            ],
        },
    }


def cluster_policy(auto_upgrade: bool = False, update_strategy: str = "OnDelete") -> Obj:
    return {
        "apiVersion": "nvidia.com/v1",
        "kind": "ClusterPolicy",
        "metadata": {"name": CLUSTER_POLICY, "uid": CLUSTER_POLICY_UID},
        "spec": {
            "daemonsets": {"updateStrategy": update_strategy},
            "driver": {"enabled": True, "upgradePolicy": {"autoUpgrade": auto_upgrade, "maxParallelUpgrades": 1}},
        },
    }


def install_operator(cluster: EmulatedCluster, kernels: Mapping[str, str]) -> list[str]:
    """Driver DaemonSets (one per kernel in `kernels`, node -> kernel) and validators, every node's
    pods Ready on the old driver; then the new driver rolled into the DaemonSets, which OnDelete
    leaves every node behind. Returns the driver DaemonSets' names."""
    # The Operator's ClusterPolicy as an external upgrade controller needs it: its own upgrade controller
    # off, driver DaemonSets OnDelete (runbooks/install-beside-gpu-operator.md).
    cluster.create("clusterpolicies", cluster_policy(), None, "nvidia.com")
    names = []
    for kernel in sorted(set(kernels.values())):
        ds = cluster.create("daemonsets", driver_daemonset(kernel, OLD_DRIVER), OPERATOR_NS, "apps")
        names.append(ds["metadata"]["name"])
        for node, k in kernels.items():
            if k == kernel:
                cluster.daemonsets.create_pod(ds, node, ready_now=True)
    for operand in (validator_daemonset(), device_plugin_daemonset()):
        made = cluster.create("daemonsets", operand, OPERATOR_NS, "apps")
        for node in kernels:
            cluster.daemonsets.create_pod(made, node, ready_now=True)
    ds_type = cluster.type("daemonsets", "apps")
    for name in names:
        kernel = name.removeprefix("nvidia-driver-daemonset-").removesuffix(f"-{OS_TAG}")
        patch = {"spec": {"template": driver_template(kernel, NEW_DRIVER)}}
        cluster.store.patch(ds_type, OPERATOR_NS, name, "application/merge-patch+json", patch)
    return names


def partition_mig(cluster: EmulatedCluster, node: str, profile: str = "1g.10gb", slices: int = 7) -> None:
    """Split one of `node`'s GPUs into MIG slices, as the MIG manager and GFD would show it."""
    def partition(obj: Obj) -> None:
        with_mig(obj, profile, slices)

    cluster.store.mutate(cluster.type("nodes"), None, node, partition)


def pinned_workload_pod(name: str, node: str, resources: Mapping[str, str], namespace: str = "ml-training") -> Obj:
    """A ReplicaSet's pod holding `resources` (e.g. a MIG slice), pinned to `node` by a nodeSelector so
    its replacement waits for that node to come back."""
    image = "nvcr.io/nvidia/pytorch:24.05-py3"
    pod = pod_object(name, node, {"app": name}, image, owner=("apps/v1", "ReplicaSet", name))
    pod["metadata"]["namespace"] = namespace
    pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    pod["spec"]["containers"][0]["resources"] = {"requests": dict(resources), "limits": dict(resources)}
    return pod


def resource_claim(name: str, node: str, driver: str = NVIDIA_DRA_DRIVER, admin: bool = False) -> Obj:
    """A resource.k8s.io/v1 ResourceClaim that `driver` allocated one device of `node` to."""
    result: Obj = {"request": "gpu", "driver": driver, "pool": node, "device": "gpu-0"}
    if admin:
        result["adminAccess"] = True
    return {
        "metadata": {"name": name},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": driver}}]}},
        "status": {
            "allocation": {
                "devices": {"results": [result]},
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                    ]
                },
            }
        },
    }


def add_dra_pod(
    cluster: EmulatedCluster, node: str | None = None, name: str = "dra-train", namespace: str = "ml-training"
) -> Obj:
    """A workload pod on `node` (the first node when None) holding a GPU only through a DRA claim
    NVIDIA's driver allocated: no `nvidia.com/gpu` resource anywhere in its spec."""
    node = node or cluster.store.objects(cluster.type("nodes"))[0]["metadata"]["name"]
    if cluster.get("namespaces", namespace) is None:
        cluster.create("namespaces", {"metadata": {"name": namespace}})
    claim = cluster.create("resourceclaims", resource_claim(f"{name}-gpu", node), namespace, "resource.k8s.io")
    pod = pinned_workload_pod(name, node, {}, namespace)
    pod["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "4"}}
    pod["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim["metadata"]["name"]}]
    return cluster.create("pods", pod, namespace)
