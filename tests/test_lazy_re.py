"""Patterns compiled at their first use (kpdoctor.lazy_re): each one kpdoctor holds compiles, and
one behaves as the compiled pattern does, at no cost after its first use."""

from __future__ import annotations

import importlib
import pkgutil
import re

import kpdoctor
from kpdoctor import lazy_re


def test_every_pattern_kpdoctor_holds_compiles() -> None:
    """A broken pattern fails here, not at a user's first use of it."""
    for mod in pkgutil.walk_packages(kpdoctor.__path__, "kpdoctor."):
        if not mod.name.endswith(".__main__"):  # that one runs the command line
            importlib.import_module(mod.name)
    assert lazy_re.compile_all() >= 400


def test_a_lazy_pattern_answers_as_the_compiled_one() -> None:
    text = "KUBE-SVC-ABC 10.96.0.10:53 and KUBE-SEP-XYZ 10.244.1.7:53"
    for source, flags in ((r"(?P<chain>KUBE-(?:SVC|SEP)-\w+) (?P<ip>[\d.]+):(\d+)", 0), (r"kube-svc", re.I)):
        lazy, eager = lazy_re.compile(source, flags), re.compile(source, flags)
        assert lazy.pattern == eager.pattern and lazy.flags == eager.flags
        assert lazy.search(text) is not None and lazy.search(text).span() == eager.search(text).span()  # type: ignore[union-attr]
        assert [m.groups() for m in lazy.finditer(text)] == [m.groups() for m in eager.finditer(text)]
        assert lazy.findall(text) == eager.findall(text) and lazy.sub("X", text) == eager.sub("X", text)
        assert lazy.split(text) == eager.split(text) and lazy.groupindex == eager.groupindex
        assert lazy.fullmatch(text) is None and lazy.match("x") is None
    raw = lazy_re.compile(rb"[0-9]+")
    assert raw.findall(b"a1b22") == [b"1", b"22"]


def test_after_its_first_use_a_pattern_s_methods_are_the_compiled_pattern_s() -> None:
    lazy = lazy_re.compile(r"\d+")
    assert "match" not in vars(lazy)
    lazy.match("1")
    assert vars(lazy)["match"].__self__ is vars(lazy)["search"].__self__
    assert isinstance(vars(lazy)["match"].__self__, re.Pattern)


def test_a_broken_pattern_raises_at_its_first_use() -> None:
    broken = lazy_re._Lazy(r"(unclosed", 0)  # not kept among kpdoctor's patterns
    try:
        broken.match("x")
    except re.error:
        pass
    else:
        raise AssertionError("a broken pattern matched")
