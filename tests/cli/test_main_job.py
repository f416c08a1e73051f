"""The main job: JupyterLab serving working copies of the notebooks, started the way `./kit lab`
starts it, and a real (headless Chromium) browser opening a lesson in it; a save through Lab
leaves the tracked notebooks as they are.

When the tests run inside the environment `./kit` made, the server is started by `./kit lab`
itself; elsewhere by the same `jupyter lab` command line. The browser check needs Debian's
`chromium` (.ci/run installs it) and is skipped with a reason where it is missing.
"""
import json
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
TOKEN = "gpumemlab-test-token"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.status, response.read()


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    work = tmp_path_factory.mktemp("lab")     # the working copies Lab opens (never notebooks/)
    port = _free_port()
    args = ["--no-browser", f"--port={port}", "--ip=127.0.0.1", f"--ServerApp.token={TOKEN}",
            "--ServerApp.open_browser=False"]
    stamp = pathlib.Path(sys.prefix) / ".gpumemlab-installed"
    env = dict(os.environ, GPUMEMLAB_VENV=sys.prefix, GPUMEMLAB_LAB_DIR=str(work))
    if stamp.exists():  # inside ./kit's environment: run the README command itself
        cmd = [str(ROOT / "kit"), "lab", *args]
    else:               # the same two steps ./kit lab takes
        subprocess.run([sys.executable, "-m", "gpumemlab.cli.workcopy", str(ROOT / "notebooks"),
                        str(work)], check=True, cwd=ROOT)
        cmd = [sys.executable, "-m", "jupyterlab", f"--notebook-dir={work}", *args]
        if os.geteuid() == 0:
            cmd.append("--allow-root")
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + 90
    try:
        while True:
            try:
                status, _ = _get(f"{base}/api/status?token={TOKEN}")
                if status == 200:
                    break
            except OSError:
                pass
            if proc.poll() is not None or time.time() > deadline:
                out = proc.stdout.read().decode(errors="replace")[-3000:] if proc.stdout else ""
                pytest.fail(f"JupyterLab did not start ({' '.join(cmd[:2])}):\n{out}")
            time.sleep(0.5)
        yield base
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


def test_lab_serves_the_notebooks(lab):
    status, body = _get(f"{lab}/api/contents?token={TOKEN}")
    items = json.loads(body)["content"]
    notebooks = sorted(i["name"] for i in items if i["type"] == "notebook")
    expected = sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb"))
    sources = sorted(p.name for p in (ROOT / "notebooks" / "src").glob("[0-9][0-9]_*.py"))
    expected = [n for n in expected if n[:2].isdigit()]
    assert status == 200 and notebooks == expected and len(notebooks) == len(sources) >= 10
    # the working copies alone: no sources folder, the manifest hidden
    assert [i["name"] for i in items if i["type"] != "notebook"] == []
    status, page = _get(f"{lab}/lab?token={TOKEN}")
    assert status == 200 and b"JupyterLab" in page
    status, body = _get(f"{lab}/api/kernelspecs?token={TOKEN}")
    assert "python3" in json.loads(body)["kernelspecs"]


@pytest.mark.skipif(shutil.which("chromium") is None, reason="Debian's chromium is not installed")
def test_a_browser_opens_a_lesson(lab):
    url = f"{lab}/lab/tree/02_fragmentation.ipynb?token={TOKEN}"
    result = subprocess.run(
        ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
         "--virtual-time-budget=20000", "--dump-dom", url],
        capture_output=True, timeout=120)
    dom = result.stdout.decode(errors="replace")
    assert result.returncode == 0, result.stderr.decode(errors="replace")[-2000:]
    # The notebook panel is rendered and shows the lesson's own title and first code cell.
    assert 'class="jp-Notebook' in dom or "jp-Notebook " in dom
    title = next(line for line in (ROOT / "notebooks" / "src" / "02_fragmentation.py").read_text()
                 .splitlines() if line.startswith("# # ")).split("·", 1)[1].strip()
    assert title in dom, title
    assert "Which device does this notebook run on" in dom  # its first code cell


def test_lab_never_writes_the_tracked_lessons(lab):
    """What Lab saves lands in the working copy; notebooks/ stays as committed."""
    body = json.dumps({"type": "notebook", "content": {"cells": [], "metadata": {},
                                                        "nbformat": 4, "nbformat_minor": 5}})
    request = urllib.request.Request(f"{lab}/api/contents/02_fragmentation.ipynb?token={TOKEN}",
                                     data=body.encode(), method="PUT",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200
    diff = subprocess.run(["git", "diff", "--quiet", "--", "notebooks/"], cwd=ROOT)
    assert diff.returncode == 0, "Lab's save changed a tracked lesson"
