"""Observe for the preflight: what `run` judges a start by, read as the policy and flags name it.

Files (policy keys or `run --ledger/--profiles`) are read once, when the controller is built: a bad
one is a ConfigError (exit 2, nothing written). ConfigMaps are read every pass (one GET each): one
that is gone, unreadable or malformed this pass holds every node it would judge, and says why. The
registry check asks only for the images of nodes at upgrade-required (core/fleet/preflight.py picks them),
through a cache. A node's pods, for the CUDA check, are listed when the schedule judges that node.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from upgrader.controller.registry import Credentials, Registry, docker_credentials
from upgrader.core.compat.cuda import Floors, parse_floors
from upgrader.core.compat.images import parse_ledger
from upgrader.core.compat.profiles import Profile, load_profiles_text
from upgrader.core.fleet.preflight import Preflight, PreflightInputs, registry_references
from upgrader.core.model.views import Snapshot
from upgrader.core.policy.policy import Policy
from upgrader.core.policy.preflight_policy import InputSource
from upgrader.inputs import LEDGER_MAX_BYTES, PROFILES_MAX_BYTES, ConfigError, read_bounded
from upgrader.kube.api import ApiError, KubeApi

log = logging.getLogger("upgrader")
LEDGER_KEY = "images.txt"
PROFILES_KEY = "profiles.yaml"


@dataclass(frozen=True)
class PreflightFlags:
    """`run`'s flags, the same as `plan`'s: they take the place of the policy's keys."""

    ledger: str | None = None
    profiles: str | None = None
    floors: Sequence[str] = ()


@dataclass(frozen=True)
class PreflightFiles:
    """The preflight's inputs as the policy and flags name them, files read (and floors parsed)."""

    ledger_source: InputSource | None
    profiles_source: InputSource | None
    floors: Floors
    ledger: frozenset[str] | None = None  # from a file
    profiles: list[Profile] | None = None  # from a file


def read_files(policy: Policy, flags: PreflightFlags | None = None) -> PreflightFiles:
    """Before anything is asked of the cluster: a file or floor that is wrong is a ConfigError (exit 2),
    named by the flag or policy key that gave it."""
    flags = flags or PreflightFlags()
    section = policy.preflight
    try:
        floors: Floors = parse_floors([*section.cuda_floors, *flags.floors])
    except ValueError as exc:
        raise ConfigError(f"preflight.cudaFloors / --floor: {exc}") from None
    ledger_source = InputSource(file=flags.ledger) if flags.ledger else section.image_ledger
    profiles_source = InputSource(file=flags.profiles) if flags.profiles else section.profiles
    ledger = None
    if ledger_source is not None and ledger_source.file is not None:
        name = "--ledger" if flags.ledger else "preflight.imageLedger.file"
        text = _read_file(ledger_source.file, name, LEDGER_MAX_BYTES)
        try:
            ledger = parse_ledger(text)
        except ValueError as exc:
            raise ConfigError(f"{name} {ledger_source.file}: {exc}") from None
    profiles = None
    if profiles_source is not None and profiles_source.file is not None:
        name = "--profiles" if flags.profiles else "preflight.profiles.file"
        text = _read_file(profiles_source.file, name, PROFILES_MAX_BYTES)
        try:
            profiles = load_profiles_text(text, profiles_source.file)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        except RecursionError:
            raise ConfigError(f"{name} {profiles_source.file}: nested too deeply") from None
    return PreflightFiles(ledger_source, profiles_source, floors, ledger, profiles)


class PreflightSource:
    def __init__(self, api: KubeApi, policy: Policy, clock: Any, files: PreflightFiles | None = None) -> None:
        files = files or read_files(policy)
        self.api = api
        self.ledger_source, self.profiles_source = files.ledger_source, files.profiles_source
        self.floors, self.ledger, self.profiles = files.floors, files.ledger, files.profiles
        check = policy.preflight.registry
        self.registry = Registry(check, clock, self._pull_credentials) if check is not None else None
        self.pull_secrets = check.pull_secrets if check is not None else ()

    def read(self, snapshot: Snapshot, policy: Policy) -> Preflight:
        """This pass's inputs; the pods of a node judged are LISTed once, when the schedule asks."""
        ledger, ledger_error = self.ledger, None
        if self.ledger_source is not None and self.ledger_source.config_map is not None:
            ledger, ledger_error = self._from_config_map(self.ledger_source, LEDGER_KEY, parse_ledger)
        profiles, profiles_error = self.profiles, None
        if self.profiles_source is not None and self.profiles_source.config_map is not None:
            where = self.profiles_source.where(PROFILES_KEY)
            profiles, profiles_error = self._from_config_map(
                self.profiles_source, PROFILES_KEY, lambda text: load_profiles_text(text, where)
            )
        answers = None
        if self.registry is not None:
            answers = self.registry.answers(registry_references(snapshot, policy))
        inputs = PreflightInputs(
            ledger,
            ledger_error,
            self.ledger_source.where(LEDGER_KEY) if self.ledger_source else "the ledger",
            profiles,
            profiles_error,
            self.floors,
            answers,
        )
        # The snapshot's reads of a node's pods, shared with the PDB-aware choice (kube/snapshot.py).
        return Preflight(inputs, snapshot.candidate_pods)

    def _from_config_map(self, source: InputSource, default_key: str, parse: Any) -> tuple[Any, str | None]:
        """What a ConfigMap holds, parsed, or why it cannot be had this pass (the nodes are then held)."""
        namespace, name = str(source.config_map).split("/", 1)
        key = source.key or default_key
        try:
            cm = self.api.get(f"/api/v1/namespaces/{namespace}/configmaps/{name}")
        except ApiError as exc:
            return None, f"cannot read configmap {source.config_map}: {exc.summary}"
        if cm is None:
            return None, f"configmap {source.config_map} not found"
        text = (cm.get("data") or {}).get(key)
        if not isinstance(text, str):
            return None, f"configmap {source.config_map} has no key {key}"
        try:
            return parse(text), None
        except (ValueError, RecursionError) as exc:
            return None, f"configmap {source.config_map} key {key}: {exc}"

    def _pull_credentials(self) -> Credentials:
        secrets = []
        for ref in self.pull_secrets:
            namespace, name = ref.split("/", 1)
            try:
                secret = self.api.get(f"/api/v1/namespaces/{namespace}/secrets/{name}")
            except ApiError as exc:
                log.warning("preflight: cannot read pull secret %s: %s", ref, exc.summary)
                continue
            if secret is None:
                log.warning("preflight: pull secret %s not found", ref)
                continue
            secrets.append(secret)
        return docker_credentials(secrets)

    def describe(self) -> str:
        """What the preflight judges by, for the log at start."""
        parts = [f"image ledger from {self.ledger_source.where(LEDGER_KEY)}" if self.ledger_source else None]
        parts.append(f"profiles from {self.profiles_source.where(PROFILES_KEY)}" if self.profiles_source else None)
        parts.append("the registry (OCI HEAD of each precompiled tag)" if self.registry else None)
        parts.append("CUDA needs of the node's pods" + (" with pinned floors" if self.floors else ""))
        return ", ".join(p for p in parts if p)


def _read_file(path: str, what: str, limit: int) -> str:
    try:
        return read_bounded(path, f"{what} {path}", limit).decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{what} {path}: not UTF-8 text") from None
