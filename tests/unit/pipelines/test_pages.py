"""Reading an instance's output a page at a time (`pipelines.pages`): pages never split a character, and
a missing file or an offset past the end is an empty page."""

from __future__ import annotations

from pathlib import Path

from pipelines.pages import read_page


def test_a_page_never_splits_a_character(tmp_path: Path) -> None:
    path = tmp_path / "out.log"
    path.write_bytes("aé✓😀b".encode())  # 1 + 2 + 3 + 4 + 1 bytes
    texts, offset = [], 0
    for limit in (2, 2, 3, 1, 4, 4):
        page = read_page(path, offset, limit)
        texts.append(page.text)
        if page.next_offset is None:
            break
        offset = page.next_offset
    assert "".join(texts) == "aé✓😀b" and "\ufffd" not in "".join(texts)
    assert read_page(tmp_path / "missing.log").text == "" and read_page(path, 99).text == ""
