"""Headless Chromium driven over the DevTools protocol, for the tests that open JupyterLab in a
real browser (tests/classroom/test_real_hub.py, tests/viz/test_viz_canvas_browser.py).

Just enough of the protocol: start Debian's ``chromium`` with a debugging port, evaluate
JavaScript in its one page (tornado's websocket client, a jupyterhub and jupyter_server
dependency) and wait for an expression to become true. Lab started with
``--LabApp.expose_app_in_browser=True`` exposes its app as ``window.jupyterapp``; LAB_STATE says
what it shows when a wait times out.
"""
import itertools
import json
import os
import signal
import socket
import subprocess
import time
import urllib.request

# what Lab shows, for a failure message: the main-area widget, its kernel, the cells' outputs
LAB_STATE = ("(() => { const a = window.jupyterapp; if (!a) return 'no window.jupyterapp';"
             " const w = [...a.shell.widgets('main')].find(w => w.sessionContext && w.content);"
             " const k = w && w.sessionContext &&"
             " w.sessionContext.session && w.sessionContext.session.kernel;"
             " return JSON.stringify({widget: w && w.title.label, kernel: k && k.name,"
             " status: k && k.status, outputs: [...document.querySelectorAll("
             "'.jp-OutputArea-output')].map(o => o.innerText.slice(0, 300))}); })()")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url, proc, what, limit=60):
    deadline = time.time() + limit
    while True:
        if proc.poll() is not None:
            raise AssertionError(f"{what} exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except Exception:
            if time.time() > deadline:
                raise AssertionError(f"{what} did not answer at {url} within {limit} s")
            time.sleep(0.3)


def stop(proc):
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def start_chromium(profile_dir):
    """(process, Browser) of a headless chromium on a free debugging port, showing about:blank."""
    port = free_port()
    proc = subprocess.Popen(
        ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
         f"--remote-debugging-port={port}", "--remote-debugging-address=127.0.0.1",
         f"--user-data-dir={profile_dir}", "--window-size=1280,1000", "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_http(f"http://127.0.0.1:{port}/json/version", proc, "chromium")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5) as r:
            page = next(t for t in json.load(r) if t["type"] == "page")
        return proc, Browser(page["webSocketDebuggerUrl"])
    except BaseException:
        stop(proc)
        raise


class Browser:
    """Just enough of the DevTools protocol: evaluate JavaScript in one page, wait for it."""

    def __init__(self, ws_url):
        from tornado.ioloop import IOLoop
        from tornado.websocket import websocket_connect
        self._loop = IOLoop()
        self._ids = itertools.count(1)
        self._ws = self._loop.run_sync(lambda: websocket_connect(ws_url, max_message_size=2**26))

    def call(self, method, limit_s=30, **params):
        msg_id = next(self._ids)

        async def roundtrip():
            await self._ws.write_message(json.dumps({"id": msg_id, "method": method,
                                                     "params": params}))
            while True:
                raw = await self._ws.read_message()
                if raw is None:
                    raise AssertionError("chromium closed the DevTools connection")
                reply = json.loads(raw)
                if reply.get("id") == msg_id:
                    return reply
        reply = self._loop.run_sync(roundtrip, timeout=limit_s)
        if "error" in reply:
            raise AssertionError(f"{method}: {reply['error']}")
        return reply["result"]

    def js(self, expression, limit_s=30):
        result = self.call("Runtime.evaluate", limit_s, expression=expression, returnByValue=True,
                           awaitPromise=True)
        if "exceptionDetails" in result:
            raise AssertionError(f"{expression!r} raised: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression, what, limit=60):
        deadline = time.time() + limit
        while True:
            try:
                value = self.js(expression)
            except (AssertionError, TimeoutError):   # a page being replaced mid-evaluation,
                value = None                          # or too busy to answer within 30 s
            if value:
                return value
            if time.time() > deadline:
                raise AssertionError(f"timed out after {limit} s waiting for {what}; page at "
                                     f"{self.js('location.href')!r}; Lab: {self.js(LAB_STATE)}")
            time.sleep(0.5)

    def close(self):
        self._ws.close()
        self._loop.close(all_fds=True)
