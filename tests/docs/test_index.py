"""The docs' home page leads to every guide and design note the site has."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(30)

DOCS = Path(__file__).resolve().parents[2] / "docs"


@pytest.mark.parametrize("folder", ["guides", "design"])
def test_the_home_page_links_every_page_of(folder: str) -> None:
    linked = set(re.findall(rf"\]\(({folder}/[\w.-]+\.md)\)",
                            (DOCS / "index.md").read_text().replace("\n", " ")))
    pages = {f"{folder}/{p.name}" for p in (DOCS / folder).glob("*.md")}

    assert sorted(pages - linked) == []
