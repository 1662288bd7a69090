"""The docs a user finds their way in (issue 32, item 9): the README is a front page of at most ~200 lines
whose links all lead to pages that exist, and every page under docs/ is in the site's navigation
(``mkdocs.yml``). CI builds the site with ``mkdocs build --strict`` (``.ci/run``), which fails on a broken
link or anchor inside it."""

from __future__ import annotations

import re

import yaml

from tests.conftest import REPO

FRONT_PAGE_LINES = 200


def test_the_readme_is_a_front_page_whose_links_lead_somewhere() -> None:
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) <= FRONT_PAGE_LINES
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    assert links and all((REPO / link).is_file() for link in links if "://" not in link), links
    for command in ("make demo", "make test"):  # the two commands
        assert command in text


def _nav_pages(nav: object) -> set[str]:
    if isinstance(nav, str):
        return {nav}
    if isinstance(nav, list):
        return {p for item in nav for p in _nav_pages(item)}
    if isinstance(nav, dict):
        return {p for value in nav.values() for p in _nav_pages(value)}
    return set()


def test_every_docs_page_is_in_the_site_navigation() -> None:
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    pages = {str(p.relative_to(REPO / "docs")) for p in (REPO / "docs").rglob("*.md")}
    assert pages == _nav_pages(config["nav"])
    assert "scenario-fields.md" in pages and "ci.md" in pages and "security.md" in pages
