"""How users show that Pods stop badly (issue 15, part 1 "More shapes"): a timed `docker stop` or
`kubectl delete`, a runtime's stop-timeout warning, a preStop script given as its own file, a
YAML fragment without apiVersion/kind.

Real posted output only: the corpus cases (tests/realworld/cases, lines copied here), and lines
posted in the public threads named at each test. The findings these shapes give are tested with
their cause: tests/checks/test_sigterm_not_forwarded.py and test_grace_period_too_short.py.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from checks.helpers import CASES, DOCKERD, DOCKERD_NEW, of

from kpdoctor.bundle.artifacts import Kind
from kpdoctor.bundle.loader import load
from kpdoctor.model import Report
from kpdoctor.parse.timing import run_command, runtime_stops, stop_command, timed_stops

Diag = Callable[..., Report]

# seed 004: the same mis-indented shape, with a 5 s sleep (within the default grace period)
HOOK_SEED4 = "    lifecycle:\n    preStop:\n      exec:\n        command:\n        - sleep\n        - 5\n"


# -- timed stops ------------------------------------------------------------------------------------
def test_the_corpus_file_as_posted_is_read_as_a_timed_stop() -> None:
    ev = load([CASES / "k8s-64015" / "docker-stop.txt"])
    (art,) = ev.artifacts
    assert art.kind == Kind.STOP_TIMING and art.first_line == 4
    assert art.attrs["started"].startswith("docker run -d --rm --name test busybox")


@pytest.mark.parametrize(
    "line,tool,timeout,stated",
    [
        ("time docker stop test", "docker", 10, False),
        ("sudo time podman stop -t 30 redlib", "podman", 30, True),
        ("time nerdctl container stop --time=5 web", "nerdctl", 5, True),
        ("time crictl stop -t 20 1f2e", "crictl", 20, True),
        ("time kubectl delete pod test-pod", "kubectl", 30, False),
        ("time kubectl -n e2e delete po/test-pod --grace-period=60", "kubectl", 60, True),
    ],
)
def test_stop_commands_and_their_timeouts(line: str, tool: str, timeout: float, stated: bool) -> None:
    cmd = stop_command(line)
    assert cmd is not None and (cmd.tool, cmd.timeout, cmd.stated) == (tool, timeout, stated)


@pytest.mark.parametrize(
    "line",
    ["time crictl stop 1f2e", "time kubectl delete pod x --force --grace-period=0", "time kubectl delete pod x --now",
     "time docker ps", "time kubectl delete deployment web --wait=false"],
)  # fmt: skip
def test_stops_that_say_nothing_about_sigterm(line: str) -> None:
    """crictl's default timeout is 0 (an immediate kill); --force/--now/--wait=false do not wait."""
    assert stop_command(line) is None


def test_zsh_and_gnu_time_formats() -> None:
    zsh = "docker stop test  0.05s user 0.02s system 0% cpu 10.408 total\n"
    (s,) = timed_stops(zsh)
    assert s.seconds == pytest.approx(10.408) and s.killed and s.command.tool == "docker"
    gnu = "test\n0.04user 0.01system 0:10.41elapsed 0%CPU (0avgtext+0avgdata 41236maxresident)k\n"
    (g,) = timed_stops(gnu, "/usr/bin/time docker stop test")
    assert g.seconds == pytest.approx(10.41)


def test_docker_run_is_read_for_its_pid_1() -> None:
    run = run_command("docker run -d --rm --name test busybox sh -c 'while true; do sleep 1; done'")
    assert run is not None and run.name == "test" and run.image == "busybox"
    assert run.command == ["sh", "-c", "while true; do sleep 1; done"] and not run.init
    podman = run_command("podman run --rm -d --name redlib -p 127.0.0.1:8080:8080 quay.io/redlib/redlib:latest")
    assert podman is not None and podman.image == "quay.io/redlib/redlib:latest" and podman.command == []


# -- runtime warnings ---------------------------------------------------------------------------------
def test_dockerd_journal_in_both_wordings_and_not_the_kill_that_failed() -> None:
    old = runtime_stops(DOCKERD)
    assert [(h.runtime, h.container[:12], h.seconds, h.signal) for h in old] == [
        ("dockerd", "679813472f3d", 10.0, "signal 15")
    ]
    (new,) = runtime_stops(DOCKERD_NEW)
    assert new.container.startswith("1ab17352d91f") and new.seconds == 10.0


# -- preStop scripts and YAML fragments -------------------------------------------------------------
def test_a_shell_script_not_named_for_a_hook_is_not_taken_for_one(tmp_path: Path) -> None:
    p = tmp_path / "notes.sh"
    p.write_text((CASES / "MeshWeaver-2043" / "preStop.sh").read_text())
    ev = load([p])
    assert not ev.artifacts


def test_a_short_prestop_fragment_is_no_finding_and_not_a_missing_hook(diagnose: Diag) -> None:
    r = diagnose({"lifecycle.yaml": HOOK_SEED4})
    assert of(r, "KP402") == [] and of(r, "KP401") == []
    assert [i.kind for i in r.inputs] == [Kind.K8S_OBJECTS.value]


@pytest.mark.parametrize("blanks", [100, 1000, 4000])
def test_a_timing_line_of_blanks_is_read_in_linear_time(blanks: int) -> None:
    """zsh's `time` line is found from its numbers: a deeply indented YAML (fuzz case 4242:1035, 18 s)
    or a crafted line of blanks (minutes) cost no backtracking."""
    import time as clock

    from kpdoctor.parse.timing import MAX_LINE, _elapsed

    lines = [
        " " * blanks + "x 0.05s user 0.02s system 0% cpu total",
        "x" + " " * blanks + "0.05s user 0.02s system 0% cpu 1.5 total",
    ]
    t0 = clock.perf_counter()
    got = [_elapsed(line[:MAX_LINE]) for line in lines]
    assert clock.perf_counter() - t0 < 0.5
    assert got[0] is None and got[1] == (1.5, "x")
    assert _elapsed("docker stop test  0.05s user 0.02s system 0% cpu 10.408 total") == (10.408, "docker stop test")
