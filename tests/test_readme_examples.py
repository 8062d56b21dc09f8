"""The README shows kpdoctor's real output: each example session, run again, prints what it shows."""

from __future__ import annotations

import pytest
from readme_examples import README, regenerate, run_session, sessions


def test_the_readme_has_example_sessions() -> None:
    assert len(sessions(README.read_text())) >= 2


@pytest.mark.parametrize("index", range(len(sessions(README.read_text()))))
def test_each_example_session_is_real_output(index: int) -> None:
    block = sessions(README.read_text())[index]
    assert run_session(block) == block, (
        "README.md's example is stale: run `.venv/bin/python tests/readme_examples.py --write` and review the diff"
    )


def test_an_unknown_command_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown command"):
        run_session("$ rm -rf /\n")
    assert regenerate("no sessions here\n") == "no sessions here\n"
