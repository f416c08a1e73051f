"""The one text cleaner: untrusted text becomes safe to write and to print, in any case."""
from __future__ import annotations

from hypothesis import given, strategies as st

from gpumemlab.cleantext import clean_text


def test_terminal_escapes_become_visible():
    out = clean_text("done\x1b[2J\r[PASS] test_1\x08\x7f\x9b")
    assert "\x1b" not in out and "\r" not in out and "\x08" not in out and "\x9b" not in out
    assert out == "done\\x1b[2J\\x0d[PASS] test_1\\x08\\x7f\\x9b"


def test_lone_surrogates_and_bidi_overrides_are_escaped():
    out = clean_text("a\ud800b\u202ec\u2066d")
    assert out == "a\\ud800b\\u202ec\\u2066d"
    out.encode("utf-8")  # would raise UnicodeEncodeError with the surrogate left in


def test_newlines_kept_or_escaped():
    assert clean_text("a\nb\tc") == "a\nb\tc"
    assert clean_text("a\nb\tc", keep_newlines=False) == "a\\x0ab\\x09c"


def test_limit_cuts_and_says_how_much():
    assert clean_text("x" * 10, limit=4) == "xxxx... [6 more characters cut]"
    assert clean_text("x" * 4, limit=4) == "xxxx"


def test_non_strings_and_hostile_str():
    class Bad:
        def __str__(self):
            raise RuntimeError("no")

    assert clean_text(12) == "12"
    assert clean_text(Bad()) == "<unprintable Bad: RuntimeError>"


@given(st.text())
def test_any_text_is_utf8_safe_and_has_no_control_characters(text):
    out = clean_text(text)
    out.encode("utf-8")
    assert not any((ord(ch) < 32 and ch not in "\n\t") or 0x7F <= ord(ch) <= 0x9F for ch in out)
