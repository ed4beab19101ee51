"""How the docs test reads and runs a page (tests/docsrun.py): steps, expected output, skips, and failures that
name the page and line. The terminal is a real bash."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.docsrun import PageError, StepFailed, Terminal, read_page, run_page, unmatched

PAGE = """# A page

Some prose.

```sh
export GREETING=hello        # a trailing comment is bash's

# a comment at the start of a block
echo "$GREETING world"
# hello world

# a comment after a blank line
cat <<'EOF' | tr a-z A-Z
# not output: the heredoc's body
it's
EOF
# # NOT OUTPUT: THE HEREDOC'S BODY
# IT'S
printf 'a\\n' \\
  'b'
echo 'two
lines'
```

<!-- docs-test: skip needs a real cloud -->
```sh
exit 3
```

```yaml
kind: NotRun
```

```sh
alias greet='echo "$GREETING from an alias"'
cd docs
```

```sh
greet; pwd
```

```output
hello from an alias
.../docs
```
"""


def test_a_page_is_read_as_steps_with_their_expected_output_and_marked_skips() -> None:
    page = read_page("p.md", PAGE)
    assert [block.line for block in page.blocks] == [5, 26, 34, 39]
    first = page.blocks[0].steps
    assert [step.line for step in first] == [6, 9, 13, 19, 21]
    assert first[0].expected == []
    assert first[1].expected == [(10, "hello world")]
    assert first[2].command.splitlines()[-1] == "EOF" and first[2].expected == [
        (17, "# NOT OUTPUT: THE HEREDOC'S BODY"), (18, "IT'S")]
    assert first[3].command == "printf 'a\\n' \\\n  'b'"
    assert first[4].command == "echo 'two\nlines'"
    assert page.blocks[1].skip == "needs a real cloud" and page.blocks[1].steps == ()
    assert [s.line for s in page.skipped] == [26]
    assert page.blocks[3].steps[0].expected == [(44, "hello from an alias"), (45, ".../docs")]


def test_output_is_matched_in_order_with_collapsed_whitespace_and_ellipses() -> None:
    output = "NAME    PHASE\nshop    Provisioned   5s\nerror: nothing\n"
    assert unmatched([(1, "NAME PHASE"), (2, "shop Provisioned")], output) is None
    assert unmatched([(1, "shop ... 5s")], output) is None
    assert unmatched([(1, "shop Provisioned"), (2, "NAME")], output) == (2, "NAME")  # order counts
    assert unmatched([(7, "shop Failed")], output) == (7, "shop Failed")


@pytest.mark.parametrize("text, message", [
    ("```sh\necho\n", "p.md:1: the ``` fence is never closed"),
    ("```sh\ncat <<EOF\nx\n```\n", "p.md:line 2: the heredoc 'EOF' is never closed"),
    ("```output\nx\n```\n", "p.md:1: an ```output block must follow a run sh block directly"),
])
def test_a_page_the_runner_cannot_read_is_refused_naming_the_line(text: str, message: str) -> None:
    with pytest.raises(PageError, match=message.replace("(", r"\(")) as error:
        read_page("p.md", text)
    assert str(error.value) == message


@pytest.fixture
def terminal(tmp_path: Path) -> Terminal:
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}
    term = Terminal(Path(__file__).resolve().parents[2], env, tmp_path)
    yield term  # type: ignore[misc]
    term.close()


def test_a_page_runs_in_one_terminal_exports_aliases_and_cd_carrying_over(terminal: Terminal) -> None:
    page = read_page("p.md", PAGE)
    assert len(list(run_page(page, terminal))) == 8  # the skipped block's `exit 3` never ran


@pytest.mark.parametrize("block, where, says", [
    ("echo one\nfalse\necho three", "p.md:3: false", "exited 1"),
    ("echo one\n# two", "p.md:3:", "has no line matching\n  two"),
    ("ls /nonexistent-dir\n# No such file", None, None),  # a failure the page shows is an expected result
    ("ls /nonexistent-dir\n# Permission denied", "p.md:3:", "(exit 2) has no line matching"),
    ("false | true", "p.md:2: false | true", "exited 1"),  # pipefail, as the convention says
])
def test_a_broken_line_or_a_changed_output_fails_naming_the_page_and_line(
        terminal: Terminal, block: str, where: str | None, says: str | None) -> None:
    page = read_page("p.md", f"```sh\n{block}\n```\n")
    if where is None:
        list(run_page(page, terminal))
        return
    with pytest.raises(StepFailed) as error:
        list(run_page(page, terminal))
    assert str(error.value).startswith(where) and says in str(error.value), error.value


def test_a_step_that_hangs_is_stopped_at_its_timeout_and_reading_stdin_gets_nothing(terminal: Terminal) -> None:
    assert terminal.run("cat; echo read-nothing", 10) == (0, "read-nothing\n")
    with pytest.raises(StepFailed, match="did not finish within 1 s; its output:\nstarted\n"):
        terminal.run("echo started; sleep 30", 1)
