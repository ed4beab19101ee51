"""docs/console.md shows every view the browser tests photograph, and every picture it shows is one of them:
the pictures are the tests' (`STEAD_SCREENSHOTS=1 make test` writes them), never drawn by hand."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
TAKEN = re.compile(r'screenshot\(\s*\w+,\s*"([\w-]+)"')
SHOWN = re.compile(r"\]\(images/console/([\w-]+)\.png\)")


def test_every_screenshot_is_in_the_docs_and_every_picture_is_a_screenshot() -> None:
    taken = {name for path in (ROOT / "tests" / "e2e").glob("test_console*.py")
             for name in TAKEN.findall(path.read_text())}
    page = (ROOT / "docs" / "console.md").read_text()
    shown = set(SHOWN.findall(page))
    assert taken, "the browser tests take screenshots"
    assert taken == shown, f"taken, not shown: {sorted(taken - shown)}; shown, not taken: {sorted(shown - taken)}"
    on_disk = {path.stem for path in (ROOT / "docs" / "images" / "console").glob("*.png")}
    assert shown <= on_disk, f"missing pictures (STEAD_SCREENSHOTS=1): {sorted(shown - on_disk)}"
