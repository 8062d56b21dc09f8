"""D10: a kube-proxy command line is split in linear time, with shlex's answers, and a command line
given by hand is read only as far as the live collector reads /proc/PID/cmdline."""

from __future__ import annotations

import random
import shlex
import time
from collections.abc import Callable

import pytest

from kpdoctor.parse import kpconfig
from kpdoctor.parse.kpconfig import MAX_CMDLINE_CHARS, read_cmdline, split_cmdline
from kpdoctor.parse.shellwords import shell_split


def test_a_one_megabyte_command_line_is_split_at_once() -> None:
    """shlex.split took about 20 s on this line (it builds a word a character at a time)."""
    line = "/usr/local/bin/kube-proxy --v=2" + "x" * 1_000_000
    t = time.perf_counter()
    argv = split_cmdline(line)
    words = shell_split(line + " '" + "y" * 1_000_000 + "'")  # no limit here: linear all the same
    assert time.perf_counter() - t < 1.0
    assert argv == ["/usr/local/bin/kube-proxy"]  # the word the limit cuts is dropped, not read half
    assert [len(w) for w in words] == [25, 1_000_005, 1_000_000]


@pytest.mark.parametrize(
    "make",
    [
        lambda n: "kube-proxy --a='" + "x" * n + "' --b=1",
        lambda n: 'kube-proxy --a="' + 'x\\"' * (n // 3) + '"',
        lambda n: 'kube-proxy --a="' + "\\\\x" * (n // 3) + '"',
        lambda n: "kube-proxy " + "--a=b " * (n // 6),
        lambda n: "kube-proxy " + "x\\ " * (n // 3),
        lambda n: "kube-proxy " + "'' \"\" " * (n // 6),
    ],
)
def test_shell_split_is_linear(make: Callable[[int], str]) -> None:
    """As much of any shape as is ever read (MAX_CMDLINE_CHARS) in well under a second (shlex:
    seconds to minutes); the same words as shlex on a small one."""
    t = time.perf_counter()
    shell_split(make(MAX_CMDLINE_CHARS))
    assert time.perf_counter() - t < 1.0
    small = make(3000)
    assert shell_split(small) == shlex.split(small)


def test_shell_split_agrees_with_shlex() -> None:
    """Quotes, escapes, empty words, unclosed quotes and trailing backslashes (ValueError)."""
    alphabet = ["a", "b", " ", "\t", "\r", "\n", "'", '"', "\\", "=", "-", "#", "$", "é", "\xa0", "\x0b"]
    rnd = random.Random(10)
    for _ in range(20_000):
        s = "".join(rnd.choice(alphabet) for _ in range(rnd.randrange(14)))
        try:
            expected: list[str] | str = shlex.split(s)
        except ValueError:
            expected = "ValueError"
        try:
            got: list[str] | str = shell_split(s)
        except ValueError:
            got = "ValueError"
        assert got == expected, repr(s)


def test_real_command_lines_read_as_before() -> None:
    for line in [
        "/usr/local/bin/kube-proxy --config=/var/lib/kube-proxy/config.conf --hostname-override=$(NODE_NAME)",
        "kube-proxy --cluster-cidr='10.244.0.0/16' --feature-gates=\"A=true,B=false\" --v=4",
        "/hyperkube proxy --kubeconfig=/etc/kubernetes/kubeconfig \\\n  --proxy-mode=ipvs",
    ]:
        assert split_cmdline(line) == shlex.split(" ".join(line.strip().splitlines()))
        assert read_cmdline(line).diagnostics == []
    assert split_cmdline("/usr/local/bin/kube-proxy\x00--v=2\x00\x00") == ["/usr/local/bin/kube-proxy", "--v=2"]
    assert split_cmdline("kube-proxy --a='unclosed --b=1") == ["kube-proxy", "--a='unclosed", "--b=1"]


@pytest.mark.parametrize("sep", [" ", "\x00"])
def test_a_long_command_line_is_cut_with_a_diagnostic(sep: str) -> None:
    head = sep.join(["/usr/local/bin/kube-proxy", "--hostname-override=node-1", "--v=2"])
    text = head + sep + "--cluster-cidr=" + "1" * (2 * MAX_CMDLINE_CHARS) + sep + "--proxy-mode=ipvs"
    cmd = read_cmdline(text)
    assert cmd.argv == ["/usr/local/bin/kube-proxy", "--hostname-override=node-1", "--v=2"]
    [d] = cmd.diagnostics
    assert "cut" in d.message and f"{len(text):,}" in d.message
    flags = kpconfig.parse_argv(kpconfig.kube_proxy_args(cmd.argv) or [], kpconfig.Source("cmdline", 1, ""))
    assert flags["hostname-override"].value == "node-1" and "proxy-mode" not in flags
    # cut exactly between two words: nothing dropped but what is past the limit
    words = ["kube-proxy"] + ["--a=" + "b" * 1000] * 300
    cmd = read_cmdline(" ".join(words))
    assert 0 < len(cmd.argv) < len(words) and set(cmd.argv[1:]) == {words[1]} and cmd.diagnostics
