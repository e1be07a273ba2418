"""Compatibility profiles: named, versioned, owned and expiring records of what was qualified where.

A profile says "this GPU product, with this driver, on this kernel and OS, was qualified on the nodes
this selector picks, by this person, on this date, until this date". Whether a node may take a
combination is then a lookup (`qualification`), and the answer is no unless an unexpired profile for
exactly that combination selects the node: a node byte-identical to a qualified one elsewhere is
still unqualified, because the selector decides.

File format (YAML):

    profiles:
      - name: h100-550
        version: 2
        owner: gpu-platform
        qualification: {date: 2026-05-04, by: jdoe, record: "https://tickets.example/GPU-1234"}
        expires: 2027-05-04
        gpuProduct: NVIDIA-H100-80GB-HBM3
        driver: "550.90.07"
        kernel: 5.15.0-113-generic
        os: ubuntu22.04
        nodeSelector: node.kubernetes.io/instance-type=p5.48xlarge   # "" = any node
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping, Sequence
from typing import Annotated, Any

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)

from upgrader.core.compat.images import OS_TAG_RE, plausible_kernel
from upgrader.core.model.input_errors import one_line, yaml_where
from upgrader.core.model.selectors import LabelSelector, SelectorError, parse_label_selector, valid_value

_DRIVER_RE = re.compile(r"^[0-9]+\.[0-9]+(?:\.[0-9]+)?$")
_NAME_RE = r"^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?$"

NonEmpty = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]


def _strict_date(value: Any) -> dt.date:
    """A calendar date: a YAML date or an ISO `YYYY-MM-DD` string; never a timestamp or a number."""
    if isinstance(value, dt.datetime):
        raise ValueError(f"must be a date like 2026-01-31, not a date and time ({value.isoformat()})")
    if isinstance(value, dt.date):
        return value
    if isinstance(value, str) and re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", value.strip()):
        try:
            return dt.date.fromisoformat(value.strip())
        except ValueError:
            pass
    raise ValueError(f"must be a date like 2026-01-31, got {value!r}")


def driver_tuple(text: str) -> tuple[int, ...] | None:
    """`550.90.07` as (550, 90, 7); None for anything that is not a dotted driver version."""
    if not isinstance(text, str) or not _DRIVER_RE.match(text):
        return None
    return tuple(int(part) for part in text.split("."))


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


class Qualification(_Model):
    """Who qualified the combination, when, and where the evidence is."""

    date: dt.date
    by: NonEmpty
    record: str  # a URL or a ticket id

    _date = field_validator("date", mode="before")(_strict_date)

    @field_validator("record")
    @classmethod
    def _record(cls, value: str) -> str:
        if not re.fullmatch(r"\S+", value):
            raise ValueError(f"must be a URL or a ticket id (no spaces), got {value!r}")
        return value


class Profile(_Model):
    name: str = Field(pattern=_NAME_RE, max_length=253)
    version: int = Field(ge=1, strict=True)
    owner: NonEmpty
    qualification: Qualification
    expires: dt.date
    gpu_product: str = Field(alias="gpuProduct")
    driver: str
    kernel: str
    os: str
    node_selector: str = Field(alias="nodeSelector")  # label selector; "" = any node

    _expires = field_validator("expires", mode="before")(_strict_date)

    @field_validator("gpu_product")
    @classmethod
    def _product(cls, value: str) -> str:
        if not value or not valid_value(value):
            raise ValueError(
                f"must be a GPU product as GPU Feature Discovery labels it (NVIDIA-H100-80GB-HBM3), got {value!r}"
            )
        return value

    @field_validator("driver", mode="before")
    @classmethod
    def _driver(cls, value: Any) -> Any:
        if isinstance(value, int | float) and not isinstance(value, bool):
            raise ValueError(f'YAML read {value!r} as a number: quote the driver version, like "550.90.07"')
        if isinstance(value, str) and driver_tuple(value) is None:
            raise ValueError(f"must be a full driver version like 550.90.07, got {value!r}")
        return value

    @field_validator("kernel")
    @classmethod
    def _kernel(cls, value: str) -> str:
        if not plausible_kernel(value):
            raise ValueError(f"must be a kernel version like 5.15.0-105-generic, got {value!r}")
        return value

    @field_validator("os")
    @classmethod
    def _os(cls, value: str) -> str:
        if not OS_TAG_RE.match(value):
            raise ValueError(f"must be an OS tag like ubuntu22.04 or rhel9.4, got {value!r}")
        return value

    @field_validator("node_selector", mode="before")
    @classmethod
    def _selector(cls, value: Any) -> Any:
        if isinstance(value, str):
            try:
                parse_label_selector(value)
            except SelectorError as exc:
                raise ValueError(str(exc)) from None
        return value

    @model_validator(mode="after")
    def _dates(self) -> Profile:
        if self.expires <= self.qualification.date:
            raise ValueError(f"expires {self.expires} is not after qualification.date {self.qualification.date}")
        return self

    @property
    def selector(self) -> LabelSelector:
        return parse_label_selector(self.node_selector)

    @property
    def label(self) -> str:
        return f"{self.name} v{self.version}"

    def live(self, today: dt.date) -> bool:
        return today < self.expires


class ProfilesFile(_Model):
    profiles: list[Profile]


def load_profiles_text(text: str, source: str = "profiles") -> list[Profile]:
    """The profiles in a YAML document; a `ValueError` of one line naming `source` and the field."""
    what = f"profiles {source}"
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        where = yaml_where(exc)
        raise ValueError(f"{what}: not valid YAML{where}") from None
    if data is None:
        raise ValueError(f"{what}: empty; expected a mapping with a `profiles` list")
    if not isinstance(data, dict):
        raise ValueError(f"{what}: expected a mapping with a `profiles` list, got a {type(data).__name__}")
    try:
        parsed = ProfilesFile.model_validate(data)
    except ValidationError as exc:
        raise ValueError(one_line(exc, what)) from None
    seen: dict[tuple[str, int], int] = {}
    for index, profile in enumerate(parsed.profiles):
        key = (profile.name, profile.version)
        if key in seen:
            raise ValueError(f"{what}: profiles.{index}: duplicate profile {profile.label} (also profiles.{seen[key]})")
        seen[key] = index
    return list(parsed.profiles)


def qualification(
    profiles: Sequence[Profile],
    node_labels: Mapping[str, str],
    product: str,
    driver: str,
    kernel: str,
    os: str,
    today: dt.date,
) -> tuple[Profile | None, str]:
    """The profile that qualifies this combination on this node, and ""; or None and why not.

    Covering means: unexpired (`today < expires`), exactly this product, driver (compared as a
    version tuple), kernel and OS, and a `nodeSelector` that matches the node's labels. Of several,
    the highest version wins. Unreadable input is a refusal with a reason, never an exception.
    """
    wanted = driver_tuple(driver)
    if wanted is None:
        return None, f"driver version {driver!r} is not a dotted version like 550.90.07"
    for value, what in ((product, "GPU product"), (kernel, "kernel"), (os, "OS")):
        if not value:
            return None, f"the node's {what} is unknown"
    combo = [
        p
        for p in profiles
        if p.gpu_product == product and driver_tuple(p.driver) == wanted and p.kernel == kernel and p.os == os
    ]
    if not combo:
        return None, f"no profile for {product}, driver {driver}, kernel {kernel}, {os}"
    here = [p for p in combo if p.selector.matches(node_labels)]
    live = sorted((p for p in here if p.live(today)), key=lambda p: (-p.version, p.name))
    if live:
        return live[0], ""
    if here:
        expired = sorted(here, key=lambda p: (p.expires, p.version, p.name), reverse=True)
        items = ", ".join(f"{p.label} expired {p.expires}" for p in expired)
        return None, f"only an expired profile covers this node: {items}"
    items = ", ".join(
        f"{p.label} (selector {p.node_selector}{'' if p.live(today) else f'; expired {p.expires}'})"
        for p in sorted(combo, key=lambda p: (p.name, -p.version))
    )
    return None, f"qualified on other nodes only: {items}"
