"""A config file posted inside the heredoc that writes it (k8s-98302) is read as the file it writes.

The sync checks that decide from one side of the evidence (issue 15, parts 1 and 3) are tested one
file per cause in tests/checks (KP101, KP105, KP107, KP112, KP113, KP202).
"""

from __future__ import annotations

from checks.helpers import HEREDOC_98302

from kpdoctor.bundle.paste import unwrap_paste


def test_a_heredoc_is_read_as_the_file_it_writes() -> None:
    u = unwrap_paste(HEREDOC_98302)
    lines = u.text.split("\n")
    assert lines[0] == "" and lines[9] == "" and lines[2] == "kind: KubeProxyConfiguration"
    assert "a heredoc's command and delimiter" in u.removed
    # A heredoc with other output after it is still the file it writes (the rest read apart);
    # without its delimiter it is not a heredoc.
    assert unwrap_paste("cat <<EOF > x\na: 1\nEOF\nmore\n").text.split("\n")[:4] == ["", "a: 1", "", "more"]
    assert unwrap_paste("cat <<EOF > x\na: 1\nb: 2\n").removed == ()
