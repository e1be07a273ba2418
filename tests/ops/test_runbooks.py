"""The runbook pages the code, Events and status link to exist, share one layout, and are indexed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from upgrader.core.report.kinds import (
    RUNBOOKS,
    BlockKind,
    FailureKind,
    HoldKind,
    Kind,
    Phase,
    WaitReason,
    block_runbook,
)

ROOT = Path(__file__).resolve().parent.parent.parent
RUNBOOK_DIR = ROOT / "runbooks"
INDEX = RUNBOOK_DIR / "README.md"
SECTIONS = ["## What you see", "## Why", "## Check", "## Do"]
# Pages that the alerts and operators reach directly, beyond the ones the code names.
EXTRA_PAGES = {
    "node-stuck-in-state",
    "rollback-driver",
    "install-beside-gpu-operator",
    "reconcile-errors",
    "controller-down",
}
ALERT_PAGES = {
    "UpgraderRolloutHalted": "rollout-halted",
    "UpgraderNodeStuckInState": "node-stuck-in-state",
    "UpgraderNodeUpgradeFailed": "upgrade-failed-recovery",
    "UpgraderReconcileErrors": "reconcile-errors",
    "UpgraderNotReconciling": "controller-down",
}
REFERENCE = re.compile(r"runbooks/([A-Za-z0-9_.-]+?)\.md")


def _pages() -> list[Path]:
    return sorted(p for p in RUNBOOK_DIR.glob("*.md") if p.name != "README.md")


def _code_references() -> dict[str, set[str]]:
    """Every `runbooks/<name>.md` written literally in the package, with the files that write it."""
    found: dict[str, set[str]] = {}
    for source in sorted((ROOT / "upgrader").rglob("*.py")):
        for name in REFERENCE.findall(source.read_text(encoding="utf-8")):
            found.setdefault(name, set()).add(str(source.relative_to(ROOT)))
    return found


def _headings(text: str) -> list[str]:
    """Markdown headings (levels 1 and 2) outside fenced code blocks."""
    out, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced and re.match(r"#{1,2} ", line):
            out.append(line.rstrip())
    return out


def test_the_runbook_directory_holds_pages() -> None:
    assert INDEX.is_file()
    assert len(_pages()) >= len(set(RUNBOOKS.values())) + len(EXTRA_PAGES)


@pytest.mark.parametrize("kind,page", sorted(RUNBOOKS.items()))
def test_every_page_the_code_maps_a_kind_to_exists(kind: str, page: str) -> None:
    path = RUNBOOK_DIR / f"{page}.md"
    assert path.is_file(), f"RUNBOOKS[{kind!r}] names {path.relative_to(ROOT)}, which does not exist"
    if kind not in ("halted", "paused"):  # a phase's page is its own; a block's or failure's is what a node cites
        assert ROOT / block_runbook(kind) == path


KINDS: list[Kind] = [*BlockKind, *FailureKind, *HoldKind, *WaitReason, *Phase]


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: f"{type(k).__name__}.{k.name}")
def test_every_kind_names_a_page_that_exists_and_a_label_prometheus_takes(kind: Kind) -> None:
    if kind.runbook is not None:
        assert (ROOT / kind.runbook).is_file(), f"{type(kind).__name__}.{kind.name}: {kind.runbook} does not exist"
    assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", kind.label), kind.label


def test_an_unknown_kind_falls_back_to_an_existing_page() -> None:
    assert (ROOT / block_runbook("no-such-kind")).is_file()
    assert BlockKind.read("no-such-kind") is None and BlockKind.read(None) is None
    assert FailureKind.of_block(BlockKind.PDB) is FailureKind.PDB
    assert FailureKind.of_block(BlockKind.STATE_LABEL) is FailureKind.FAILED  # a state-label block never times out


def test_the_reference_scanner_finds_what_it_should() -> None:
    assert REFERENCE.findall('f"see runbooks/pdb-blocked-eviction.md", "runbooks/x.y.md"') == [
        "pdb-blocked-eviction",
        "x.y",
    ]


def test_every_runbook_named_in_the_code_exists() -> None:
    missing = {
        f"runbooks/{name}.md": sorted(sources)
        for name, sources in _code_references().items()
        if not (RUNBOOK_DIR / f"{name}.md").is_file()
    }
    assert not missing, f"named in the code but missing: {missing}"


@pytest.mark.parametrize("name", sorted(EXTRA_PAGES | set(ALERT_PAGES.values())))
def test_the_operational_pages_exist(name: str) -> None:
    assert (RUNBOOK_DIR / f"{name}.md").is_file()


@pytest.mark.parametrize("alert,page", sorted(ALERT_PAGES.items()))
def test_alert_pages_name_their_alert_under_what_you_see(alert: str, page: str) -> None:
    text = (RUNBOOK_DIR / f"{page}.md").read_text(encoding="utf-8")
    seen = text.split("## What you see", 1)[1].split("\n## ", 1)[0]
    assert f"`{alert}`" in seen, f"{page}.md does not name {alert} under 'What you see'"


@pytest.mark.parametrize("page", _pages(), ids=lambda p: p.stem)
def test_every_page_has_a_title_and_the_four_sections_in_order(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    headings = _headings(text)
    assert headings, f"{page.name} has no headings"
    assert text.startswith("# ") and headings[0].startswith("# "), f"{page.name} must start with '# <title>'"
    assert len(headings[0]) > 2
    assert [h for h in headings if h.startswith("# ")] == [headings[0]], f"{page.name}: one title only"
    assert [h for h in headings if h.startswith("## ")] == SECTIONS, page.name
    for section, following in zip(SECTIONS, [*SECTIONS[1:], None], strict=True):
        body = text.split(section + "\n", 1)[1]
        if following is not None:
            body = body.split(following + "\n", 1)[0]
        assert body.strip(), f"{page.name}: '{section}' is empty"


@pytest.mark.parametrize("page", _pages(), ids=lambda p: p.stem)
def test_every_do_section_is_numbered_steps(page: Path) -> None:
    do = page.read_text(encoding="utf-8").split("## Do\n", 1)[1]
    assert re.search(r"^1\. ", do, re.MULTILINE), f"{page.name}: 'Do' should be numbered steps"


@pytest.mark.parametrize("page", _pages(), ids=lambda p: p.stem)
def test_the_index_links_every_page(page: Path) -> None:
    assert f"]({page.name})" in INDEX.read_text(encoding="utf-8"), f"README.md does not link {page.name}"


def test_every_link_between_pages_resolves() -> None:
    for page in [*_pages(), INDEX]:
        for target in re.findall(r"\]\(([^)#:]+\.md)\)", page.read_text(encoding="utf-8")):
            assert (RUNBOOK_DIR / target).is_file(), f"{page.name} links {target}, which does not exist"


def test_every_block_kind_the_index_lists_is_counted_by_the_metrics() -> None:
    """A blocked node of any kind shows in upgrader_blocked_nodes, not only in the per-node series."""
    from upgrader.controller.rollout_metrics import BLOCK_REASONS, reason_label

    text = INDEX.read_text(encoding="utf-8")
    blocked_section = text.split("## Blocked", 1)[1].split("\n## ", 1)[0]
    kinds = re.findall(r"^\| \[[^\]]+\]\([^)]+\) \| `([a-z-]+)` \|", blocked_section, flags=re.MULTILINE)
    assert len(kinds) >= 7, kinds
    assert {reason_label(k) for k in kinds} <= set(BLOCK_REASONS)
