"""The page's code renders values as text only, and the page has no inline script or style for the CSP to
have to allow."""

from __future__ import annotations

import re
from pathlib import Path

from operators.console.server import CSP, STATIC, page

MARKUP_SINKS = re.compile(r"\.(innerHTML|outerHTML|insertAdjacentHTML)\b|document\.write|\beval\(|new Function\(")


def test_no_script_of_the_console_writes_markup() -> None:
    scripts = sorted(STATIC.rglob("*.js"))
    assert scripts
    offenders = [f"{path.relative_to(STATIC)}:{number}" for path in scripts
                 for number, line in enumerate(path.read_text().splitlines(), 1) if MARKUP_SINKS.search(line)]
    assert offenders == []


def test_the_page_has_no_inline_script_or_style_and_links_every_stylesheet() -> None:
    html = page(STATIC).decode()
    assert not re.search(r"<script(?![^>]*\bsrc=)", html) and "style=" not in html and "<style" not in html
    for css in STATIC.glob("css/*.css"):
        assert f'href="/console/static/css/{css.name}"' in html
    assert "'unsafe-inline'" not in CSP and "'unsafe-eval'" not in CSP


def test_the_markup_check_would_catch_a_sink(tmp_path: Path) -> None:
    assert MARKUP_SINKS.search("el.innerHTML = output") and MARKUP_SINKS.search("document.write(x)")
