"""Evidence is shown, never obeyed: text from logs, file and archive names reaches the reader's
terminal only with its control characters made visible.

A hostile or merely dirty bundle can hold escape sequences (``ESC]0;`` sets the window title,
``ESC[2J`` clears the screen, OSC 52 writes the clipboard on some terminals) and bytes that are not
UTF-8 (names on a Linux file system need not be). Every renderer passes evidence text through here.
"""

from __future__ import annotations

import re

from rich.markup import escape as _markup_escape

# C0 controls but tab and newline, DEL, C1 controls (0x9b is a one-byte CSI), lone surrogates
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")
_JSON_UNSAFE = re.compile("[\x7f-\x9f\ud800-\udfff]")


def _visible(m: re.Match[str]) -> str:
    c = m.group()
    return "\ufffd" if "\ud800" <= c <= "\udfff" else f"\\x{ord(c):02x}"


def printable(text: str) -> str:
    """``text`` with control characters shown as ``\\x1b`` and undecodable bytes as U+FFFD."""
    return _CONTROL.sub(_visible, text) if _CONTROL.search(text) else text


MAX_SHOWN = 4000  # characters of one string on a terminal: Rich's escaping is quadratic in some shapes


def escape(text: str) -> str:
    """For Rich: at most :data:`MAX_SHOWN` characters, control characters made visible, then
    markup escaped."""
    if len(text) > MAX_SHOWN:
        text = f"{text[:MAX_SHOWN]} [... {len(text) - MAX_SHOWN:,} more characters]"
    return _markup_escape(printable(text))


def plain(text: str) -> str:
    """For a Rich ``Text`` (no markup read): at most :data:`MAX_SHOWN` characters, control
    characters made visible."""
    if len(text) > MAX_SHOWN:
        text = f"{text[:MAX_SHOWN]} [... {len(text) - MAX_SHOWN:,} more characters]"
    return printable(text)


def json_safe(text: str) -> str:
    """JSON text as valid UTF-8 with no raw C1 control: those characters (only ever inside JSON
    strings) become ``\\uXXXX`` escapes, which mean the same."""
    return _JSON_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text) if _JSON_UNSAFE.search(text) else text
