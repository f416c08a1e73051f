"""Issue 34's small ones: a course secret others may read is refused, ``--hub`` is read as a
browser reads it, Gradescope emails match by exact address after ASCII lower-casing, and a
certificate page of tag soup is read in linear time."""
import os
import time

import pytest

from gpumemlab.classroom.gradescope.identity import _match
from gpumemlab.classroom.links import LinkError, hub_url
from gpumemlab.classroom.variants import VariantError, create_secret, read_secret


def test_a_secret_others_may_read_is_refused_with_the_chmod(tmp_path):
    path = tmp_path / "course.secret"
    create_secret(path)
    assert len(read_secret(path)) >= 32
    os.chmod(path, 0o644)
    with pytest.raises(VariantError) as info:
        read_secret(path)
    assert f"chmod 600 {path}" in str(info.value) and "\n" not in str(info.value)
    assert len(read_secret(path, private=False)) >= 32   # the locked autograder container


def test_the_kits_gitignore_lists_the_secret():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    assert "course.secret" in (root / ".gitignore").read_text().split()


@pytest.mark.parametrize("hub", ["https://evil.example\\.hub.example.edu",
                                 "https://evil.example\\@hub.example.edu",
                                 "https://user@hub.example.edu", "https:evil.example",
                                 "https://hub.ex%61mple.edu", "https://evil.example#.hub.edu",
                                 "javascript://hub.example.edu"])
def test_a_hub_a_browser_would_read_otherwise_is_refused(hub):
    with pytest.raises(LinkError) as info:
        hub_url(hub)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("hub", ["https://hub.example.edu", "https://hub.example.edu/prefix/",
                                 "http://[::1]:8000", "HTTPS://Hub.Example.edu:443/p"])
def test_plain_hubs_pass(hub):
    assert hub_url(hub) == hub.rstrip("/")


@pytest.mark.parametrize("given, found", [("Sam@Uni.edu", "sam@uni.edu"),
                                          ("\u017fam@uni.edu", None),      # long s
                                          ("stra\u00dfe@uni.edu", None),   # sharp s
                                          ("SAM@UNI.EDU", "sam@uni.edu")])
def test_emails_match_by_exact_address_after_ascii_lowercasing(given, found):
    assert _match(given, "email", ["sam@uni.edu", "strasse@uni.edu"]) == found


def test_a_certificate_page_of_tag_soup_is_read_in_linear_time():
    from gpumemlab.certificates.record import completion_record
    from gpumemlab.certificates.render import html_mismatch, render_html

    cert = completion_record("Ada Lovelace", "GPU memory", 9, 10, date="2026-12-01")
    page = render_html(cert)
    took = {}
    for kib in (8, 64):
        hostile = page.replace('data-field="name">', 'data-field="name">' + "<a " * (kib << 8), 1)
        start = time.perf_counter()
        reason = html_mismatch(cert, hostile)
        took[kib] = time.perf_counter() - start
        assert reason.startswith("the page shows name")
    assert took[64] < 1.0, took   # HTMLParser: 62 KB took 157 s
    edited = page.replace('data-field="name">Ada Lovelace', 'data-field="name">Eve', 1)
    assert "signed name is 'Ada Lovelace'" in html_mismatch(cert, edited)
