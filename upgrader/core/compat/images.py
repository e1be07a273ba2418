"""Precompiled driver images: the tag `<branch>-<kernel>-<os>` a node needs, and the ledger of tags we have.

A precompiled driver image holds modules built for one kernel on one OS, so the tag is the contract:
same branch with another kernel, or same kernel on another OS, is another image. A node whose
combination has no image loses its GPUs quietly when its driver pod fails to pull, so the tag is
computed from what the node itself reports and checked against the ledger before a rollout.

Kernel and OS come from Node Feature Discovery labels, else from `status.nodeInfo`. Anything that
cannot be read is a `ValueError` naming the field, never a guess.
"""

from __future__ import annotations

import re

from upgrader.core.model.views import NodeView

KERNEL_LABEL = "feature.node.kubernetes.io/kernel-version.full"
OS_ID_LABEL = "feature.node.kubernetes.io/system-os_release.ID"
OS_VERSION_LABEL = "feature.node.kubernetes.io/system-os_release.VERSION_ID"

# `uname -r`: starts with numeric major.minor, then an optional release suffix
# ("5.15.0-105-generic", "5.14.0-427.13.1.el9_4.x86_64", "6.1.0+rpt-rpi-v8").
KERNEL_RE = re.compile(r"^[0-9]+\.[0-9]+(?:\.[0-9]+)?(?:[-.+_~][0-9A-Za-z](?:[0-9A-Za-z._+~-]*[0-9A-Za-z])?)?$")
MAX_KERNEL = 100
# os-release ID and VERSION_ID: lower-case letters, digits, ".", "_", "-".
_OS_ID_RE = re.compile(r"^[a-z][a-z0-9._-]*$")
_OS_VERSION_RE = re.compile(r"^[0-9][a-z0-9._-]*$")
# A driver version (`550.90.07`) or a bare branch (`550`).
_DRIVER_RE = re.compile(r"^([0-9]+)(?:\.[0-9]+){0,2}$")
# The OS part of a tag: an os-release ID followed by its VERSION_ID ("ubuntu22.04", "rhcos4.15").
OS_TAG_RE = re.compile(r"^[a-z][a-z0-9._-]*?[0-9][a-z0-9._-]*$")
# An OCI image tag.
_TAG_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")

# status.nodeInfo.osImage, as PRETTY_NAME reads on the distributions precompiled drivers exist for.
_UBUNTU_IMAGE = re.compile(r"^Ubuntu ([0-9]+\.[0-9]+)(?:\.[0-9]+)?(?: |$)")
_RHCOS_IMAGE = re.compile(r"^Red Hat Enterprise Linux CoreOS ([0-9]+)\.")
_RHEL_IMAGE = re.compile(r"^Red Hat Enterprise Linux(?: Server)? ([0-9]+\.[0-9]+)(?: |$)")


def plausible_kernel(text: str) -> bool:
    """A kernel release string as `uname -r` prints it (no spaces, no slashes, not "unknown")."""
    return len(text) <= MAX_KERNEL and bool(KERNEL_RE.match(text))


def kernel_of(node: NodeView) -> str:
    """The node's running kernel: NFD's `kernel-version.full`, else `status.nodeInfo.kernelVersion`.

    When both are present they must agree: a stale NFD label (the node rebooted into a new kernel and
    NFD has not relabelled yet) would name an image built for the wrong kernel.
    """
    info = node.kernel
    if info and not plausible_kernel(info):
        raise ValueError(f"node {node.name}: status.nodeInfo.kernelVersion {info!r} is not a kernel version")
    if KERNEL_LABEL in node.labels:
        label = node.labels[KERNEL_LABEL]
        if not plausible_kernel(label):
            raise ValueError(f"node {node.name}: label {KERNEL_LABEL}={label!r} is not a kernel version")
        if info and info != label:
            raise ValueError(
                f"node {node.name}: label {KERNEL_LABEL}={label!r} disagrees with "
                f"status.nodeInfo.kernelVersion {info!r} (stale Node Feature Discovery label?)"
            )
        return label
    if not info:
        raise ValueError(
            f"node {node.name}: no kernel version (neither label {KERNEL_LABEL} nor status.nodeInfo.kernelVersion)"
        )
    if not plausible_kernel(info):
        raise ValueError(f"node {node.name}: status.nodeInfo.kernelVersion {info!r} is not a kernel version")
    return info


def os_from_image(os_image: str) -> str:
    """`ubuntu22.04`, `rhel9.4` or `rhcos4.15` from a node's `status.nodeInfo.osImage`."""
    ubuntu = _UBUNTU_IMAGE.match(os_image)
    if ubuntu:
        return f"ubuntu{ubuntu.group(1)}"
    rhcos = _RHCOS_IMAGE.match(os_image)
    if rhcos:
        # RHCOS versions encode the OpenShift release: 415.92.<date> is OpenShift 4.15, 49.84 is 4.9.
        # A one-digit first component is the newer RHEL-based numbering, which does not say.
        release = rhcos.group(1)
        if len(release) < 2:
            raise ValueError(f"osImage {os_image!r} does not say which OpenShift release it is")
        return f"rhcos{release[0]}.{int(release[1:])}"
    rhel = _RHEL_IMAGE.match(os_image)
    if rhel:
        return f"rhel{rhel.group(1)}"
    raise ValueError(f"osImage {os_image!r} is not a distribution upgrader can name")


def os_tag(node: NodeView) -> str:
    """The OS part of the image tag: NFD's os_release `ID` + `VERSION_ID`, else parsed from `osImage`.

    When the NFD labels are present they are used, and must be readable; `osImage` must then not
    contradict them (when it can be parsed at all).
    """
    os_id, version = node.labels.get(OS_ID_LABEL), node.labels.get(OS_VERSION_LABEL)
    if os_id is None and version is None:
        if not node.os_image.strip():
            raise ValueError(
                f"node {node.name}: no OS (neither labels {OS_ID_LABEL}/VERSION_ID nor status.nodeInfo.osImage)"
            )
        try:
            return os_from_image(node.os_image)
        except ValueError as exc:
            raise ValueError(f"node {node.name}: status.nodeInfo.{exc}") from None
    if os_id is None or not _OS_ID_RE.match(os_id):
        raise ValueError(f"node {node.name}: label {OS_ID_LABEL}={os_id!r} is not an os-release ID")
    if version is None or not _OS_VERSION_RE.match(version):
        raise ValueError(f"node {node.name}: label {OS_VERSION_LABEL}={version!r} is not an os-release VERSION_ID")
    tag = f"{os_id}{version}"
    try:
        from_image = os_from_image(node.os_image)
    except ValueError:
        return tag  # an osImage we cannot parse does not overrule NFD
    if from_image != tag:
        raise ValueError(
            f"node {node.name}: labels {OS_ID_LABEL}/VERSION_ID say {tag} but status.nodeInfo.osImage "
            f"{node.os_image!r} says {from_image} (stale Node Feature Discovery labels?)"
        )
    return tag


def driver_branch(driver_version: str) -> str:
    """`550` from `550.90.07` (or from the bare branch `550`)."""
    match = _DRIVER_RE.match(driver_version)
    if not match:
        raise ValueError(f"driver version {driver_version!r} is not a version like 550.90.07 or a branch like 550")
    return match.group(1)


def precompiled_tag(driver_version: str, kernel: str, os: str) -> str:
    """`<branch>-<kernel>-<os>`, e.g. `550-5.15.0-105-generic-ubuntu22.04`."""
    branch = driver_branch(driver_version)
    if not plausible_kernel(kernel):
        raise ValueError(f"kernel {kernel!r} is not a kernel version")
    if not OS_TAG_RE.match(os):
        raise ValueError(f"OS tag {os!r} is not like ubuntu22.04")
    tag = f"{branch}-{kernel}-{os}"
    if not _TAG_RE.match(tag):
        raise ValueError(f"{tag!r} cannot be an image tag (at most 128 of A-Z a-z 0-9 _ . -)")
    return tag


def node_image_tag(node: NodeView, driver_version: str) -> str:
    """The precompiled driver image tag this node needs for `driver_version`."""
    return precompiled_tag(driver_version, kernel_of(node), os_tag(node))


def _tag_of(reference: str) -> str | None:
    """The tag of `registry/repo:tag` (a `@digest` suffix is ignored), or the text itself if a bare tag."""
    name = reference.split("@", 1)[0]
    if "/" not in name and ":" not in name:
        return name
    slash, colon = name.rfind("/"), name.rfind(":")
    return name[colon + 1 :] if colon > slash else None


def parse_ledger(text: str) -> frozenset[str]:
    """The image tags in a ledger: one tag (or full image reference) a line; `#` starts a comment."""
    tags = set()
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if any(ch.isspace() for ch in line):
            raise ValueError(f"ledger line {number}: {line!r} has spaces inside the image tag")
        tag = _tag_of(line)
        if tag is None:
            raise ValueError(f"ledger line {number}: {line!r} has no tag (expected repository:tag or a bare tag)")
        if not _TAG_RE.match(tag):
            raise ValueError(f"ledger line {number}: {tag!r} is not an image tag")
        tags.add(tag)
    return frozenset(tags)
