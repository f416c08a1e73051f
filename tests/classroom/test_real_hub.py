"""A real JupyterHub on 127.0.0.1: the nbgitpuller link `gpumemlab course link` prints clones a
local git repository of the kit into a dummy student's home and opens lesson 01 in JupyterLab;
headless Chromium logs in, follows the link and runs the lesson's first cell, whose output must
appear on the page.

Pieces, all installed before the test runs (nothing downloads here): jupyterhub and nbgitpuller
(the project's test extras), npm's configurable-http-proxy (`./kit env` puts it in
``<venv>/node``), Debian's chromium and git (.ci/run). A missing piece FAILS the test, it never
skips: the course path is what a teacher relies on.

The hub uses jupyterhub's DummyAuthenticator (any name, no password) and its
SimpleLocalProcessSpawner (each user's server runs as the hub's own OS user, root included, with
a home folder under the test's tmp folder). The repository is served over git's smart HTTP
protocol (git http-backend behind a small server, git_smart_http.py): the link wants an http(s)
repository address, and nbgitpuller's shallow clone needs the smart protocol.
The browser is driven over the Chrome DevTools Protocol (tornado's websocket client, a
jupyterhub dependency); the single-user servers expose Lab's app as ``window.jupyterapp``, and the
cell runs through Lab's own ``notebook:run-cell`` command once the kernel is idle.
"""
import importlib.util
import os
import pathlib
import shutil
import subprocess
import sys
import textwrap

import pytest
from cdp_browser import free_port as _free_port, start_chromium, stop as _stop
from cdp_browser import wait_http as _wait_http

ROOT = pathlib.Path(__file__).resolve().parents[2]
CHP = pathlib.Path(sys.prefix) / "node" / "node_modules" / ".bin" / "configurable-http-proxy"
USER = "student1"


def _missing():
    gone = [name for name in ("jupyterhub", "nbgitpuller", "tornado")
            if importlib.util.find_spec(name) is None]
    if not CHP.exists():
        gone.append(f"configurable-http-proxy ({CHP}; ./kit env installs it with npm)")
    gone += [tool for tool in ("chromium", "git") if shutil.which(tool) is None]
    return gone


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    gone = _missing()
    if gone:   # fail, never skip: CI must have every piece
        pytest.fail("the real-hub test needs: " + ", ".join(gone) + " (./kit env and .ci/run "
                    "install them)", pytrace=False)
    tmp = tmp_path_factory.mktemp("hub")
    procs = []
    try:
        # the course repository: this checkout's HEAD as branch main, served over git's smart HTTP
        served = tmp / "srv"
        bare = served / "gpumemlab.git"
        subprocess.run(["git", "init", "-q", "--bare", str(bare)], check=True)
        subprocess.run(["git", "-C", str(ROOT), "push", "-q", str(bare), "HEAD:refs/heads/main"],
                       check=True)
        subprocess.run(["git", "-C", str(bare), "symbolic-ref", "HEAD", "refs/heads/main"],
                       check=True)
        subprocess.run(["git", "-C", str(bare), "update-server-info"], check=True)
        git_port = _free_port()
        git_http = subprocess.Popen(
            [sys.executable, str(pathlib.Path(__file__).with_name("git_smart_http.py")),
             str(git_port), str(served)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True)
        procs.append(git_http)
        repo = f"http://127.0.0.1:{git_port}/gpumemlab.git"
        _wait_http(f"{repo}/info/refs", git_http, "the git HTTP server")

        hub_port = _free_port()
        homes = tmp / "home"
        homes.mkdir()
        singleuser = pathlib.Path(sys.prefix) / "bin" / "jupyterhub-singleuser"
        config = tmp / "jupyterhub_config.py"
        config.write_text(textwrap.dedent(f"""\
            c.JupyterHub.ip = "127.0.0.1"
            c.JupyterHub.port = {hub_port}
            c.JupyterHub.hub_ip = "127.0.0.1"
            c.JupyterHub.hub_port = {_free_port()}
            c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{_free_port()}"
            c.ConfigurableHTTPProxy.command = [{str(CHP)!r}]
            c.JupyterHub.db_url = "sqlite:///{tmp / 'hub.sqlite'}"
            c.JupyterHub.cookie_secret_file = {str(tmp / 'cookie_secret')!r}
            c.JupyterHub.pid_file = {str(tmp / 'hub.pid')!r}
            c.JupyterHub.authenticator_class = "dummy"
            c.Authenticator.allow_all = True
            c.JupyterHub.spawner_class = "simple"
            c.SimpleLocalProcessSpawner.home_dir_template = {str(homes)!r} + "/{{username}}"
            c.Spawner.cmd = [{str(singleuser)!r}]
            c.Spawner.default_url = "/lab"
            # window.jupyterapp: the test drives Lab through its own command registry
            c.Spawner.args = ["--LabApp.expose_app_in_browser=True"] + (
                ["--allow-root"] if {os.geteuid() == 0} else [])
            c.Spawner.start_timeout = 60
            c.Spawner.http_timeout = 60
            c.Spawner.environment = {{"GPUMEMLAB_DEVICE": "sim"}}
            """))
        env = dict(os.environ, PATH=f"{sys.prefix}/bin:{os.environ.get('PATH', '')}")
        hub_log = open(tmp / "hub.log", "wb")
        hub = subprocess.Popen([sys.executable, "-m", "jupyterhub", "-f", str(config)], cwd=tmp,
                               env=env, stdout=hub_log, stderr=subprocess.STDOUT,
                               start_new_session=True)
        procs.append(hub)
        hub_url = f"http://127.0.0.1:{hub_port}"
        _wait_http(f"{hub_url}/hub/api", hub, f"JupyterHub (log: {tmp / 'hub.log'})")

        chromium, browser = start_chromium(tmp / "chromium")
        procs.append(chromium)
        browser.call("Emulation.setFocusEmulationEnabled", enabled=True)
        try:
            yield {"hub": hub_url, "repo": repo, "browser": browser, "homes": homes,
                   "log": tmp / "hub.log"}
        finally:
            browser.close()
    finally:
        for proc in reversed(procs):
            _stop(proc)


def test_course_link_opens_and_runs_a_lesson_on_a_real_hub(stack):
    browser, hub = stack["browser"], stack["hub"]
    out = subprocess.run([sys.executable, "-m", "gpumemlab.cli", "course", "link", "--hub", hub,
                          "--repo", stack["repo"], "--lesson", "01"],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout
    links = [word for word in out.split() if word.startswith(f"{hub}/hub/user-redirect/git-pull")]
    assert len(links) == 1, out
    link = links[0]

    # log in through the hub's own form (DummyAuthenticator: any name, no password)
    browser.call("Page.navigate", url=f"{hub}/hub/login")
    browser.wait_for("!!document.querySelector('#username_input')", "the hub's login form")
    browser.js(f"document.querySelector('#username_input').value = {USER!r};"
               "document.querySelector('#login_submit').click(); true")
    browser.wait_for(f"location.pathname.startsWith('/user/{USER}/') || "
                     "location.pathname.startsWith('/hub/spawn-pending')",
                     "the login to land on the student's server", limit=60)

    # the link: nbgitpuller clones the course, then redirects into Lab on lesson 01
    browser.call("Page.navigate", url=link)
    browser.wait_for("location.pathname.includes('/lab/tree/gpumemlab.git/notebooks/01_')",
                     f"nbgitpuller to pull and open lesson 01 (hub log: {stack['log']})",
                     limit=60)
    clone = stack["homes"] / USER / "gpumemlab.git"
    assert (clone / ".git").is_dir() and sorted(clone.glob("notebooks/01_*.ipynb")), \
        f"nbgitpuller made no clone at {clone}"

    # run the first code cell (the device banner) through Lab's own commands, once the
    # notebook's kernel is idle, and read its output off the page. The notebook is looked up
    # among the main area's widgets: shell.currentWidget follows focus, which a headless page
    # may never get.
    notebook = ("[...window.jupyterapp.shell.widgets('main')]"
                ".find(w => w.sessionContext && w.content)")
    browser.wait_for(f"(() => {{ const w = window.jupyterapp && {notebook};"
                     " const k = w && w.content.widgets.length && w.sessionContext.session"
                     " && w.sessionContext.session.kernel; return !!k && k.status === 'idle';"
                     " })()", f"lesson 01's kernel to be idle (hub log: {stack['log']})",
                     limit=90)
    browser.js(f"(async () => {{ const a = window.jupyterapp; const w = {notebook};"
               " a.shell.activateById(w.id);"
               " w.content.activeCellIndex = w.content.widgets.findIndex("
               "c => c.model.type === 'code');"
               " await a.commands.execute('notebook:run-cell'); return true; })()")
    text = browser.wait_for(
        "(() => { const o = document.querySelector('.jp-Notebook .jp-CodeCell "
        ".jp-OutputArea-output'); return o && o.innerText.trim(); })()",
        f"the first cell's output (hub log: {stack['log']})", limit=90)
    assert "simulated GPU" in text or "real GPU" in text, text
    assert "Traceback" not in text and "Error" not in text, text
