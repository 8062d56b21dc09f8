"""A Markdown report shows names and evidence as written: nothing in them becomes structure.

The attack: a file name or a log line holding a backtick fence, a heading, raw HTML or a link
ends up live in the ticket the report is pasted into (the fence closes early and the rest renders
as Markdown). Checked by parsing the output with a CommonMark parser (markdown-it-py, which Rich
already depends on), and for the terminal, that no control character reaches it raw.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from kpdoctor.report.safe import md_cell, md_fence, md_text

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "src/kpdoctor/demo/bundles/xtables-lock-contention"
MD = MarkdownIt("commonmark").enable("table")
HOSTILE = (
    "```",
    "~~~",
    "````` x",
    "\n# pwned heading\n",
    "<img src=x onerror=alert(1)>",
    "</pre><script>alert(1)</script>",
    "[click](http://evil.example/)",
    "![x](http://evil.example/x.png)",
    "<http://evil.example>",
    "| a | b |",
    "\n---\n",
    "\n> quoted\n",
    "\n1. listed\n",
    "*bold* _em_ ~~strike~~",
    "&lt;script&gt;",
    "\x1b]0;pwned\x07\x1b[2J\x9b31m",
    "\\`",
)
INLINE_OK = {"text", "code_inline", "softbreak", "escape"}
LIST_ITEM = {"bullet_list_open", "list_item_open", "paragraph_open", "inline", "paragraph_close", "list_item_close",
             "bullet_list_close"}  # fmt: skip


def _inline_only(text: str) -> list[str]:
    """Why ``text`` (one rendered inline string) is more than text: [] when it is only text."""
    tokens = MD.parse(text)
    kinds = [t.type for t in tokens]
    if kinds and kinds != ["paragraph_open", "inline", "paragraph_close"]:
        return [f"blocks {kinds}"]
    children = tokens[1].children or [] if tokens else []
    return [f"inline {c.type}" for c in children if c.type not in INLINE_OK]


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("`~#<>[]()!*_|&\\-+=.1 \n\tax:/;\x1b")), max_size=40))
def test_md_text_renders_as_text_whatever_it_holds(s: str) -> None:
    assert _inline_only(md_text(s)) == []
    item = MD.parse("- " + md_text(s))  # inside a list item, as the report lists names
    assert {t.type for t in item} <= LIST_ITEM and [t.type for t in item].count("list_item_open") == 1
    assert all(c.type in INLINE_OK for t in item for c in t.children or [])


@pytest.mark.parametrize("s", HOSTILE)
def test_each_hostile_form_shows_as_written(s: str) -> None:
    html = MD.render(md_text(s))
    assert "<img" not in html and "<script" not in html and "<a " not in html and "<h1" not in html
    if "\x1b" not in s:  # what a reader sees is what was there (lines joined)
        shown = MD.parse(md_text(s))[1].children or []
        text = "".join(c.content for c in shown)
        assert text.strip() == " ".join(s.splitlines()).strip() or "`" in s


@pytest.mark.parametrize("runs", [0, 1, 3, 4, 7])
def test_no_line_can_close_the_fence(runs: int) -> None:
    lines = ["before", "`" * runs + " inside", "# still code", "<b>code</b>"]
    tokens = MD.parse("\n".join([*md_fence(lines), "after"]))
    assert tokens[0].type == "fence" and tokens[0].content.splitlines() == lines
    assert [t.type for t in tokens[1:]] == ["paragraph_open", "inline", "paragraph_close"]


def test_a_pipe_never_splits_a_table_cell() -> None:
    row = "| " + " | ".join(md_cell(x) for x in ("a|b", "`c|d`", "e\\|f")) + " |"
    html = MD.render("| x | y | z |\n|---|---|---|\n" + row + "\n")
    assert html.count("<td>") == 3
