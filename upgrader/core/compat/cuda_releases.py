"""The toolkit driver of each CUDA release: the Linux x86_64 driver NVIDIA packaged with that toolkit.

A driver at or above it runs the release's builds under backward compatibility, PTX JIT included;
below it, down to the major's floor, only minor-version compatibility holds (SASS only). See
docs/compatibility.md#the-three-paths and `upgrader.core.compat.cuda`.

Source: NVIDIA, CUDA Toolkit Release Notes, section "CUDA Driver", Table 3 "CUDA Toolkit and
Corresponding Driver Versions", column "Linux x86_64 Driver Version" (current notes at
https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/ ; each release's own notes under
https://docs.nvidia.com/cuda/archive/<X.Y.Z>/cuda-toolkit-release-notes/ give its X.Y.Z). Rows 11.0
to 13.2 Update 2 as the 13.2 Update 2 notes print them (the 11.x and 12.x rows are the same in the
13.1 and 13.4 Update 1 notes); 13.3 and 13.3 Update 1 as the 13.3 notes print them. From 13.4 the
driver is no longer bundled on Linux and the notes name a driver branch per release instead ("CUDA
13.4 | R615": "CUDA 13.4 new features ... require an R615 or later driver"), so those rows carry the
branch: any driver of that branch or later runs them under backward compatibility.

Releases are keyed by the toolkit's own X.Y.Z, which is not always "Update N = X.Y.N": CUDA 11.0 GA
is 11.0.2 (11.0.1 was the RC), and 13.4 GA is 13.4.1 (13.4.0 was a developer preview). "X.Y" means
the GA of X.Y: the PTX ISA a toolkit emits changes with X.Y, not with its updates, so the GA's
driver JIT-compiles what any X.Y build carries; a workload that names an update gets that row.

To add a release when NVIDIA publishes one: append its row below exactly as the release notes print
it (X.Y.Z from the archive URL, the name, the Linux x86_64 driver), then run
`pytest tests/core/test_cuda_releases.py`, which checks the rows' order and bounds. Until a release
is here, `compat` and `plan` refuse it; `--floor X.Y=DRIVER` pins its toolkit driver meanwhile.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

Version = tuple[int, ...]


@dataclass(frozen=True)
class ToolkitRelease:
    version: Version  # the toolkit's X.Y.Z, e.g. (12, 4, 1)
    name: str  # as the release notes name it, e.g. "CUDA 12.4 Update 1"
    driver: Version  # the Linux x86_64 toolkit driver; for a branch row, the branch: (615,)
    driver_text: str  # as NVIDIA prints it, zero-padded: 535.54.03, or a branch: R615

    @property
    def label(self) -> str:
        """The name with the X.Y.Z where the name lacks it: they differ in more than style for 13.4."""
        number = ".".join(map(str, self.version))
        return self.name if number in self.name else f"{self.name} ({number})"

    @property
    def is_ga(self) -> bool:
        return self.name.endswith(" GA")

    @property
    def what(self) -> str:
        """What the driver column is for this release, for a one-line reason."""
        if self.driver_text.startswith("R"):
            return f"the driver branch NVIDIA names for {self.label}"
        return f"the toolkit driver of {self.label}"


# (X.Y.Z, name, Linux x86_64 driver), newest first, as the release notes' Table 3 lists them.
_ROWS: tuple[tuple[str, str, str], ...] = (
    ("13.4.2", "CUDA 13.4 Update 1", "R615"),
    ("13.4.1", "CUDA 13.4 GA", "R615"),  # 13.4.0 was a developer preview, not a release
    ("13.3.1", "CUDA 13.3 Update 1", "610.43.02"),
    ("13.3.0", "CUDA 13.3 GA", "610.43.02"),
    ("13.2.2", "CUDA 13.2 Update 2", "595.71.05"),
    ("13.2.1", "CUDA 13.2 Update 1", "595.58.03"),
    ("13.2.0", "CUDA 13.2 GA", "595.45.04"),
    ("13.1.1", "CUDA 13.1 Update 1", "590.48.01"),
    ("13.1.0", "CUDA 13.1 GA", "590.44.01"),
    ("13.0.2", "CUDA 13.0 Update 2", "580.95.05"),
    ("13.0.1", "CUDA 13.0 Update 1", "580.82.07"),
    ("13.0.0", "CUDA 13.0 GA", "580.65.06"),
    ("12.9.1", "CUDA 12.9 Update 1", "575.57.08"),
    ("12.9.0", "CUDA 12.9 GA", "575.51.03"),
    ("12.8.1", "CUDA 12.8 Update 1", "570.124.06"),
    ("12.8.0", "CUDA 12.8 GA", "570.26"),
    ("12.6.3", "CUDA 12.6 Update 3", "560.35.05"),
    ("12.6.2", "CUDA 12.6 Update 2", "560.35.03"),
    ("12.6.1", "CUDA 12.6 Update 1", "560.35.03"),
    ("12.6.0", "CUDA 12.6 GA", "560.28.03"),
    ("12.5.1", "CUDA 12.5 Update 1", "555.42.06"),
    ("12.5.0", "CUDA 12.5 GA", "555.42.02"),
    ("12.4.1", "CUDA 12.4 Update 1", "550.54.15"),
    ("12.4.0", "CUDA 12.4 GA", "550.54.14"),
    ("12.3.1", "CUDA 12.3 Update 1", "545.23.08"),
    ("12.3.0", "CUDA 12.3 GA", "545.23.06"),
    ("12.2.2", "CUDA 12.2 Update 2", "535.104.05"),
    ("12.2.1", "CUDA 12.2 Update 1", "535.86.09"),
    ("12.2.0", "CUDA 12.2 GA", "535.54.03"),
    ("12.1.1", "CUDA 12.1 Update 1", "530.30.02"),
    ("12.1.0", "CUDA 12.1 GA", "530.30.02"),
    ("12.0.1", "CUDA 12.0 Update 1", "525.85.12"),
    ("12.0.0", "CUDA 12.0 GA", "525.60.13"),
    ("11.8.0", "CUDA 11.8 GA", "520.61.05"),
    ("11.7.1", "CUDA 11.7 Update 1", "515.48.07"),
    ("11.7.0", "CUDA 11.7 GA", "515.43.04"),
    ("11.6.2", "CUDA 11.6 Update 2", "510.47.03"),
    ("11.6.1", "CUDA 11.6 Update 1", "510.47.03"),
    ("11.6.0", "CUDA 11.6 GA", "510.39.01"),
    ("11.5.2", "CUDA 11.5 Update 2", "495.29.05"),
    ("11.5.1", "CUDA 11.5 Update 1", "495.29.05"),
    ("11.5.0", "CUDA 11.5 GA", "495.29.05"),
    ("11.4.4", "CUDA 11.4 Update 4", "470.82.01"),
    ("11.4.3", "CUDA 11.4 Update 3", "470.82.01"),
    ("11.4.2", "CUDA 11.4 Update 2", "470.57.02"),
    ("11.4.1", "CUDA 11.4 Update 1", "470.57.02"),
    ("11.4.0", "CUDA 11.4.0 GA", "470.42.01"),
    ("11.3.1", "CUDA 11.3.1 Update 1", "465.19.01"),
    ("11.3.0", "CUDA 11.3.0 GA", "465.19.01"),
    ("11.2.2", "CUDA 11.2.2 Update 2", "460.32.03"),
    ("11.2.1", "CUDA 11.2.1 Update 1", "460.32.03"),
    ("11.2.0", "CUDA 11.2.0 GA", "460.27.03"),
    ("11.1.1", "CUDA 11.1.1 Update 1", "455.32"),
    ("11.1.0", "CUDA 11.1 GA", "455.23"),
    ("11.0.3", "CUDA 11.0.3 Update 1", "450.51.06"),
    ("11.0.2", "CUDA 11.0.2 GA", "450.51.05"),
    ("11.0.1", "CUDA 11.0.1 RC", "450.36.06"),
)


def _version(text: str) -> Version:
    return tuple(int(part) for part in text.removeprefix("R").split("."))


RELEASES: Mapping[Version, ToolkitRelease] = MappingProxyType(
    {_version(v): ToolkitRelease(_version(v), name, _version(d), d) for v, name, d in _ROWS}
)
# X.Y -> its GA: what a workload that names only X.Y is judged against.
GA: Mapping[Version, ToolkitRelease] = MappingProxyType(
    {r.version[:2]: r for r in RELEASES.values() if r.is_ga}
)
NEWEST: ToolkitRelease = max(RELEASES.values(), key=lambda r: r.version)


def lookup(release: Version) -> ToolkitRelease | None:
    """The row for X.Y (its GA) or X.Y.Z (that exact release); None when the table lacks it."""
    if len(release) == 2:
        return GA.get(release)
    return RELEASES.get(release) if len(release) == 3 else None


def siblings(release: Version) -> list[ToolkitRelease]:
    """The known releases of the same X.Y, oldest first: what a lookup of an unknown X.Y.Z might mean."""
    return sorted((r for r in RELEASES.values() if r.version[:2] == release[:2]), key=lambda r: r.version)
