"""Integers from untrusted text, without the ways ``int()`` fails on it.

``str.isdigit()`` is true of ``"²"`` and ``"①"``, which ``int()`` refuses; ``\\d`` in a ``str``
pattern matches every Unicode decimal digit; and ``int()`` raises ``ValueError`` on more than
4,300 digits. No counter, port, PID or MTU a node prints has more than 20 digits, so anything
longer is not a number kpdoctor can use.
"""

from __future__ import annotations

MAX_DIGITS = 40


def to_int(text: str | None) -> int | None:
    """``int(text)`` for plain ASCII decimal digits (an optional leading ``-``), else None."""
    if not text:
        return None
    digits = text[1:] if text[0] == "-" else text
    if not digits or len(digits) > MAX_DIGITS or not (digits.isascii() and digits.isdigit()):
        return None
    return int(text)


def is_int(text: str | None) -> bool:
    """Would :func:`to_int` read it (ASCII digits only, no sign)?"""
    return text is not None and 0 < len(text) <= MAX_DIGITS and text.isascii() and text.isdigit()
