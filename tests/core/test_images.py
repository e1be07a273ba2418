"""Precompiled driver image tags (docs/compatibility.md#precompiled-driver-images): `<branch>-<kernel>-<os>`
from what the node reports."""

from __future__ import annotations

from typing import Any

import pytest

from upgrader.core.compat.images import (
    KERNEL_LABEL,
    OS_ID_LABEL,
    OS_VERSION_LABEL,
    kernel_of,
    node_image_tag,
    os_from_image,
    os_tag,
    parse_ledger,
    precompiled_tag,
)
from upgrader.core.model.views import NodeView, node_view

K105, K113 = "5.15.0-105-generic", "5.15.0-113-generic"
UBUNTU = "Ubuntu 22.04.4 LTS"
NFD_UBUNTU = {OS_ID_LABEL: "ubuntu", OS_VERSION_LABEL: "22.04"}


def make(
    labels: dict[str, str] | None = None, kernel: str | None = None, os_image: str | None = None
) -> NodeView:
    """A node as the API returns it; `None` leaves the nodeInfo field out."""
    info: dict[str, Any] = {}
    if kernel is not None:
        info["kernelVersion"] = kernel
    if os_image is not None:
        info["osImage"] = os_image
    return node_view({"metadata": {"name": "gpu-a-01", "labels": labels or {}}, "status": {"nodeInfo": info}})


# ----- kernel_of -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("labels", "kernel", "expected"),
    [
        ({KERNEL_LABEL: K105}, K105, K105),  # both, agreeing (the emulator's nodes)
        ({KERNEL_LABEL: K113}, None, K113),  # NFD only
        ({KERNEL_LABEL: K113}, "", K113),  # NFD, nodeInfo empty
        ({}, K105, K105),  # nodeInfo only
        ({}, "5.14.0-427.13.1.el9_4.x86_64", "5.14.0-427.13.1.el9_4.x86_64"),  # RHEL
        ({}, "6.8.0-1008-aws", "6.8.0-1008-aws"),
        ({}, "6.1.0+rpt-rpi-v8", "6.1.0+rpt-rpi-v8"),
        ({}, "5.15", "5.15"),
    ],
)
def test_kernel_of_reads_nfd_then_node_info(
    labels: dict[str, str], kernel: str | None, expected: str
) -> None:
    assert kernel_of(make(labels, kernel)) == expected


@pytest.mark.parametrize(
    ("labels", "kernel", "needle"),
    [
        ({}, None, "no kernel version"),
        ({}, "", "no kernel version"),
        ({}, "   ", "status.nodeInfo.kernelVersion '   ' is not a kernel version"),
        ({}, "unknown", "status.nodeInfo.kernelVersion 'unknown' is not a kernel version"),
        ({}, "5.15.0 105 generic", "is not a kernel version"),
        ({}, "5.15.0/105-generic", "is not a kernel version"),
        ({}, "../../etc", "is not a kernel version"),
        ({}, "generic-5.15", "is not a kernel version"),
        ({}, "5", "is not a kernel version"),
        ({}, "5.15.0-", "is not a kernel version"),
        ({}, "5.15.0-105-generic.", "is not a kernel version"),
        ({}, "5." + "1" * 120, "is not a kernel version"),  # longer than any release string
        ({KERNEL_LABEL: ""}, K105, f"label {KERNEL_LABEL}='' is not a kernel version"),
        ({KERNEL_LABEL: "unknown"}, K105, f"label {KERNEL_LABEL}='unknown' is not a kernel version"),
        ({KERNEL_LABEL: "5.15.0 105"}, None, "is not a kernel version"),
        ({KERNEL_LABEL: K105}, K113, "disagrees with status.nodeInfo.kernelVersion '5.15.0-113-generic'"),
    ],
)
def test_kernel_of_refuses_what_it_cannot_read(
    labels: dict[str, str], kernel: str | None, needle: str
) -> None:
    with pytest.raises(ValueError, match="gpu-a-01") as err:
        kernel_of(make(labels, kernel))
    assert needle in str(err.value)


# ----- os_tag -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("os_image", "expected"),
    [
        ("Ubuntu 22.04.4 LTS", "ubuntu22.04"),
        ("Ubuntu 22.04 LTS", "ubuntu22.04"),
        ("Ubuntu 24.04.1 LTS", "ubuntu24.04"),
        ("Ubuntu 20.04.6", "ubuntu20.04"),
        ("Red Hat Enterprise Linux 9.4 (Plow)", "rhel9.4"),
        ("Red Hat Enterprise Linux 8.10 (Ootpa)", "rhel8.10"),
        ("Red Hat Enterprise Linux Server 7.9 (Maipo)", "rhel7.9"),
        ("Red Hat Enterprise Linux CoreOS 415.92.202402201450-0 (Plow)", "rhcos4.15"),
        ("Red Hat Enterprise Linux CoreOS 410.84.202210040010-0 (Ootpa)", "rhcos4.10"),
        ("Red Hat Enterprise Linux CoreOS 49.84.202110220538-0 (Ootpa)", "rhcos4.9"),
    ],
)
def test_os_image_forms(os_image: str, expected: str) -> None:
    assert os_from_image(os_image) == expected
    assert os_tag(make(os_image=os_image)) == expected


@pytest.mark.parametrize(
    ("os_image", "needle"),
    [
        ("Ubuntu", "is not a distribution"),
        ("Ubuntu 22", "is not a distribution"),
        ("Ubuntu22.04", "is not a distribution"),
        ("ubuntu 22.04", "is not a distribution"),
        ("Debian GNU/Linux 12 (bookworm)", "is not a distribution"),
        ("Container-Optimized OS from Google", "is not a distribution"),
        ("Red Hat Enterprise Linux", "is not a distribution"),
        ("Red Hat Enterprise Linux CoreOS 9.6.20250523-0 (Plow)", "does not say which OpenShift release"),
        ("Red Hat Enterprise Linux CoreOS (Plow)", "is not a distribution"),
    ],
)
def test_os_image_refusals(os_image: str, needle: str) -> None:
    with pytest.raises(ValueError, match=r"gpu-a-01: status\.nodeInfo\.osImage") as err:
        os_tag(make(os_image=os_image))
    assert needle in str(err.value)


@pytest.mark.parametrize(
    ("labels", "os_image", "expected"),
    [
        (NFD_UBUNTU, UBUNTU, "ubuntu22.04"),  # both, agreeing (the emulator's nodes)
        (NFD_UBUNTU, None, "ubuntu22.04"),  # NFD only
        (NFD_UBUNTU, "Some Custom Distro 1.0", "ubuntu22.04"),  # an unparseable osImage does not overrule NFD
        ({OS_ID_LABEL: "rhel", OS_VERSION_LABEL: "9.4"}, "Red Hat Enterprise Linux 9.4 (Plow)", "rhel9.4"),
        ({OS_ID_LABEL: "rhcos", OS_VERSION_LABEL: "4.15"}, None, "rhcos4.15"),
        ({OS_ID_LABEL: "debian", OS_VERSION_LABEL: "12"}, "Debian GNU/Linux 12 (bookworm)", "debian12"),
    ],
)
def test_os_tag_prefers_nfd(labels: dict[str, str], os_image: str | None, expected: str) -> None:
    assert os_tag(make(labels, os_image=os_image)) == expected


@pytest.mark.parametrize(
    ("labels", "os_image", "needle"),
    [
        ({}, None, "no OS"),
        ({}, "", "no OS"),
        ({}, "   ", "no OS"),
        ({OS_ID_LABEL: "ubuntu"}, UBUNTU, f"label {OS_VERSION_LABEL}=None"),
        ({OS_VERSION_LABEL: "22.04"}, UBUNTU, f"label {OS_ID_LABEL}=None"),
        ({OS_ID_LABEL: "", OS_VERSION_LABEL: "22.04"}, None, f"label {OS_ID_LABEL}=''"),
        ({OS_ID_LABEL: "Ubuntu", OS_VERSION_LABEL: "22.04"}, None, f"label {OS_ID_LABEL}='Ubuntu'"),
        ({OS_ID_LABEL: "ubuntu", OS_VERSION_LABEL: ""}, None, f"label {OS_VERSION_LABEL}=''"),
        ({OS_ID_LABEL: "ubuntu", OS_VERSION_LABEL: "jammy"}, None, f"label {OS_VERSION_LABEL}='jammy'"),
        ({OS_ID_LABEL: "ubuntu", OS_VERSION_LABEL: "22 04"}, None, f"label {OS_VERSION_LABEL}='22 04'"),
        ({OS_ID_LABEL: "ubuntu", OS_VERSION_LABEL: "22.04"}, "Ubuntu 24.04.1 LTS", "say ubuntu22.04 but"),
    ],
)
def test_os_tag_refusals(labels: dict[str, str], os_image: str | None, needle: str) -> None:
    with pytest.raises(ValueError, match="gpu-a-01") as err:
        os_tag(make(labels, os_image=os_image))
    assert needle in str(err.value)


# ----- precompiled_tag / node_image_tag --------------------------------------------------------------


@pytest.mark.parametrize(
    ("driver", "kernel", "os", "expected"),
    [
        ("550.90.07", K105, "ubuntu22.04", "550-5.15.0-105-generic-ubuntu22.04"),
        ("550", K105, "ubuntu22.04", "550-5.15.0-105-generic-ubuntu22.04"),  # a bare branch
        ("525.60.13", "5.15.0-69-generic", "ubuntu22.04", "525-5.15.0-69-generic-ubuntu22.04"),  # DOMAIN §4
        ("535.161.08", K113, "ubuntu22.04", "535-5.15.0-113-generic-ubuntu22.04"),
        ("390.157", K113, "ubuntu20.04", "390-5.15.0-113-generic-ubuntu20.04"),
        ("550.90.07", "5.14.0-427.13.1.el9_4.x86_64", "rhel9.4", "550-5.14.0-427.13.1.el9_4.x86_64-rhel9.4"),
        (
            "550.90.07",
            "5.14.0-284.52.1.el9_2.x86_64",
            "rhcos4.15",
            "550-5.14.0-284.52.1.el9_2.x86_64-rhcos4.15",
        ),
    ],
)
def test_precompiled_tag(driver: str, kernel: str, os: str, expected: str) -> None:
    assert precompiled_tag(driver, kernel, os) == expected


def test_same_branch_other_kernel_or_os_is_another_image() -> None:
    base = precompiled_tag("550.90.07", K105, "ubuntu22.04")
    assert precompiled_tag("550.54.15", K105, "ubuntu22.04") == base  # same branch, same image name
    assert precompiled_tag("550.90.07", K113, "ubuntu22.04") != base
    assert precompiled_tag("550.90.07", K105, "ubuntu24.04") != base
    assert precompiled_tag("535.161.08", K105, "ubuntu22.04") != base


@pytest.mark.parametrize(
    ("driver", "kernel", "os", "needle"),
    [
        ("", K105, "ubuntu22.04", "driver version ''"),
        ("r550", K105, "ubuntu22.04", "driver version 'r550'"),
        ("v550.90.07", K105, "ubuntu22.04", "driver version"),
        ("550.", K105, "ubuntu22.04", "driver version"),
        (".550", K105, "ubuntu22.04", "driver version"),
        ("550..07", K105, "ubuntu22.04", "driver version"),
        ("550.90.07.1", K105, "ubuntu22.04", "driver version"),
        ("550.90.07 ", K105, "ubuntu22.04", "driver version"),
        ("latest", K105, "ubuntu22.04", "driver version"),
        ("550-90-07", K105, "ubuntu22.04", "driver version"),
        ("550.90.07", "", "ubuntu22.04", "kernel ''"),
        ("550.90.07", "unknown", "ubuntu22.04", "kernel 'unknown'"),
        (
            "550.90.07",
            "6.1.0+rpt-rpi-v8",
            "ubuntu22.04",
            "cannot be an image tag",
        ),  # "+" is not allowed in a tag
        ("550.90.07", K105, "", "OS tag ''"),
        ("550.90.07", K105, "ubuntu", "OS tag 'ubuntu'"),
        ("550.90.07", K105, "Ubuntu22.04", "OS tag"),
        ("550.90.07", K105, "ubuntu 22.04", "OS tag"),
        ("550.90.07", "5.15.0-" + "1" * 90, "ubuntu22.04-" + "x" * 40, "cannot be an image tag"),  # > 128
    ],
)
def test_precompiled_tag_refusals(driver: str, kernel: str, os: str, needle: str) -> None:
    with pytest.raises(ValueError) as err:
        precompiled_tag(driver, kernel, os)
    assert needle in str(err.value)


def test_node_image_tag_for_an_emulator_node() -> None:
    node = node_view(
        {
            "metadata": {"name": "gpu-b-02", "labels": {KERNEL_LABEL: K113, **NFD_UBUNTU}},
            "status": {"nodeInfo": {"kernelVersion": K113, "osImage": UBUNTU}},
        }
    )
    assert node_image_tag(node, "550.90.07") == "550-5.15.0-113-generic-ubuntu22.04"


def test_node_image_tag_from_node_info_alone() -> None:
    node = make(kernel="5.14.0-427.13.1.el9_4.x86_64", os_image="Red Hat Enterprise Linux 9.4 (Plow)")
    assert node_image_tag(node, "550") == "550-5.14.0-427.13.1.el9_4.x86_64-rhel9.4"


@pytest.mark.parametrize(
    ("node", "driver", "needle"),
    [
        (make({**NFD_UBUNTU}), "550.90.07", "no kernel version"),
        (make({KERNEL_LABEL: K105}), "550.90.07", "no OS"),
        (make({KERNEL_LABEL: K105, **NFD_UBUNTU}), "550.x", "driver version '550.x'"),
    ],
)
def test_node_image_tag_refusals(node: NodeView, driver: str, needle: str) -> None:
    with pytest.raises(ValueError) as err:
        node_image_tag(node, driver)
    assert needle in str(err.value)


# ----- parse_ledger -----------------------------------------------------------------------------------

A = "550-5.15.0-105-generic-ubuntu22.04"
B = "550-5.15.0-113-generic-ubuntu22.04"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", set()),
        ("\n\n   \n", set()),
        ("# only a comment\n", set()),
        (f"{A}\n{B}\n", {A, B}),
        (f"{A}\r\n{B}", {A, B}),  # CRLF, no final newline
        (f"  {A}  \n\t{B}\t\n", {A, B}),  # surrounding whitespace
        (f"# built 2026-05\n{A}  # trailing comment\n\n{B}#tight\n", {A, B}),
        (f"nvcr.io/nvidia/driver:{A}\n{B}\n", {A, B}),  # a full reference counts as its tag
        (f"registry.local:5000/nvidia/driver:{A}\n", {A}),  # a registry port is not a tag
        (f"driver:{A}\n", {A}),
        (f"nvcr.io/nvidia/driver:{A}@sha256:{'0' * 64}\n", {A}),  # a pinned digest keeps its tag
        (f"{A}\n{A}\nnvcr.io/nvidia/driver:{A}\n", {A}),  # duplicates collapse
    ],
)
def test_parse_ledger(text: str, expected: set[str]) -> None:
    assert parse_ledger(text) == frozenset(expected)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (f"{A}\n550-5.15.0 -105-generic-ubuntu22.04\n", "ledger line 2: "),
        (f"{A}\n\n# c\nnvcr.io/nvidia/driver: {B}\n", "ledger line 4: "),
        (f"{A} {B}\n", "ledger line 1: "),
        (f"{A}\n\tfoo\tbar # x\n", "ledger line 2: "),
    ],
)
def test_parse_ledger_refuses_spaces_inside_a_tag(text: str, needle: str) -> None:
    with pytest.raises(ValueError) as err:
        parse_ledger(text)
    assert str(err.value).startswith(needle)
    assert "spaces" in str(err.value)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("nvcr.io/nvidia/driver\n", "ledger line 1: 'nvcr.io/nvidia/driver' has no tag"),
        (
            f"{A}\nregistry.local:5000/nvidia/driver\n",
            "ledger line 2: 'registry.local:5000/nvidia/driver' has no tag",
        ),
        (f"nvcr.io/nvidia/driver@sha256:{'0' * 64}\n", "ledger line 1: "),
        ("nvcr.io/nvidia/driver:\n", "ledger line 1: '' is not an image tag"),
        ("-550-5.15.0-105-generic-ubuntu22.04\n", "is not an image tag"),
        ("550+5.15.0\n", "ledger line 1: '550+5.15.0' is not an image tag"),
        ("x" * 129 + "\n", "is not an image tag"),
    ],
)
def test_parse_ledger_refuses_what_is_not_a_tag(text: str, needle: str) -> None:
    with pytest.raises(ValueError) as err:
        parse_ledger(text)
    assert needle in str(err.value)


def test_ledger_cross_check_finds_the_unbuilt_kernel() -> None:
    """DOMAIN §4: the ledger is checked against every node's (branch, kernel, OS) before a rollout."""
    ledger = parse_ledger(f"nvcr.io/nvidia/driver:{A}\nnvcr.io/nvidia/driver:{B}\n")
    nodes = [make({KERNEL_LABEL: k, **NFD_UBUNTU}, k, UBUNTU) for k in (K105, K113, "5.15.0-119-generic")]
    missing = [node_image_tag(n, "550.90.07") for n in nodes if node_image_tag(n, "550.90.07") not in ledger]
    assert missing == ["550-5.15.0-119-generic-ubuntu22.04"]
