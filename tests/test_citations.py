"""What the code, the tests and the docs cite is in this repository: every `docs/<page>.md` (and
`#anchor`) names a page and a heading it holds, and nothing cites a document the repository does not
carry (the design notes upgrader grew from live outside it; docs/ is the reference)."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CITATION = re.compile(r"\bdocs/([a-z0-9_-]+\.md)(#[a-z0-9-]+)?")
OUTSIDE = re.compile(r"\b(?:DOMAIN|DESIGN)\.md\b|\.\./shared/")
WHERE = ("upgrader", "tests", "bench", "docs", "runbooks", "deploy", "policies")


def sources() -> list[Path]:
    found = [ROOT / "README.md"]
    for top in WHERE:
        found += [p for p in (ROOT / top).rglob("*") if p.suffix in (".py", ".md", ".yaml") and p.is_file()]
    return sorted(found)


def slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces as dashes."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"[^a-z0-9 -]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """The page's headings as anchors, and the `<a id="...">` it places inside sections."""
    text = page.read_text(encoding="utf-8")
    headings = [line.lstrip("#") for line in text.splitlines() if line.startswith("#")]
    return {slug(h) for h in headings} | set(re.findall(r'<a id="([a-z0-9-]+)"></a>', text))


@cache
def citations() -> list[tuple[str, str, str]]:
    out = []
    for path in sources():
        for page, anchor in CITATION.findall(path.read_text(encoding="utf-8")):
            out.append((str(path.relative_to(ROOT)), page, anchor.lstrip("#")))
    return out


def test_a_heading_reads_as_its_anchor() -> None:
    crd = " Without the CRD: the policy file and the ConfigMaps"
    assert slug(crd) == "without-the-crd-the-policy-file-and-the-configmaps"
    assert slug(" Waiting, blocked, failed, halted") == "waiting-blocked-failed-halted"
    assert slug(" `upgrader run`'s start") == "upgrader-runs-start"


@pytest.mark.parametrize("cited", sorted({(page, anchor) for _, page, anchor in citations()}),
                         ids=lambda c: f"{c[0]}#{c[1]}" if c[1] else c[0])
def test_every_cited_page_and_heading_is_in_docs(cited: tuple[str, str]) -> None:
    page, anchor = cited
    path = ROOT / "docs" / page
    who = sorted({src for src, p, a in citations() if (p, a) == cited})[:3]
    assert path.is_file(), f"docs/{page}, cited by {who}, is not in the repository"
    if anchor:
        assert anchor in anchors(path), f"docs/{page}#{anchor}, cited by {who}, names no heading of docs/{page}"


def test_nothing_cites_a_document_outside_the_repository() -> None:
    outside = [f"{p.relative_to(ROOT)}: {m.group(0)}" for p in sources() if p != Path(__file__)
               for m in OUTSIDE.finditer(p.read_text(encoding="utf-8"))]
    assert not outside, outside
