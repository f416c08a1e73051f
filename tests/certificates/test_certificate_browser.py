"""A signed certificate opened in a real browser (Debian's headless chromium) shows the learner's
name, course, score, date and ID, and loads nothing from the network (it must work offline)."""
import shutil
import subprocess

import pytest

from gpumemlab.certificates.record import issue_certificate
from gpumemlab.certificates.keys import generate_keypair

pytestmark = pytest.mark.skipif(shutil.which("chromium") is None,
                                reason="Debian's chromium is not installed")


def test_certificate_page_renders_offline(tmp_path):
    priv, _ = generate_keypair(tmp_path / "keys")
    cert = issue_certificate("Grace Hopper", "GPU Memory Management", 18, 20, "2026-11-30", priv,
                             issuer="Dr. Teacher")
    paths = cert.write(tmp_path / "out", "grace")
    html = paths["html"]
    page = html.read_text(encoding="utf-8")
    assert "http://" not in page and "https://" not in page  # self-contained: no CDN, no fonts
    shot = tmp_path / "shot.png"
    run = subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu",
                          "--disable-dev-shm-usage", "--dump-dom", f"file://{html}"],
                         capture_output=True, timeout=120)
    dom = run.stdout.decode(errors="replace")
    assert run.returncode == 0
    for text in ("Grace Hopper", "GPU Memory Management", "18 / 20 (90%)", cert.id):
        assert text in dom, text
    run = subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu",
                          "--disable-dev-shm-usage", "--window-size=1100,800",
                          f"--screenshot={shot}", f"file://{html}"], capture_output=True, timeout=120)
    assert run.returncode == 0 and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert shot.stat().st_size > 10_000  # a rendered page, not a blank one
