"""Under ``gpumemlab plan`` a script has no network: a download is refused at once (no wait for a
lookup or a connection to time out) with the error an offline machine gives, and the plan says
which download, that the planner runs offline, and the script's line that asked for it."""
import os

from .plan_run import plan_fixture as _plan


def test_a_download_is_refused_and_named_with_the_scripts_line(library):
    run, r, script = _plan("downloads_data.py", timeout=120)
    assert run.returncode == 2 and r["fits"] is None
    assert r["error"] == ("the script tried to download https://data.example.org/cora.tgz; the "
                          "planner runs offline: give it local data at downloads_data.py:9 in "
                          "<module>"), r["error"]
    assert os.path.samefile(r["stopped_at"]["file"], script) and r["stopped_at"]["line"] == 9
    assert r["network_refused"] == ["https://data.example.org/cora.tgz"]
    assert r["peak_allocated_bytes"] >= 2 * 512 * 512 * 4     # w and its gradient, before it
    assert "Traceback" not in run.stderr


def test_a_socket_connection_is_refused_at_once(library):
    run, r, script = _plan("opens_a_socket.py")
    assert run.returncode == 2
    assert r["error"].startswith("the script tried to connect to 192.0.2.10:8080; the planner "
                                 "runs offline: give it local data at opens_a_socket.py:8"), r["error"]
    assert os.path.samefile(r["stopped_at"]["file"], script)


def test_a_script_that_falls_back_to_its_own_data_plans_and_is_told(library):
    run, r, _ = _plan("falls_back_offline.py")
    assert run.returncode == 0, r["error"]
    assert r["fits"] is True and "rows 1024" in run.stderr
    assert r["peak_allocated_bytes"] == 1024 * 1024 * 4
    notes = " ".join(n["what"] for n in r["not_seen"])
    assert "network refused (1 attempts, first http://data.example.org/tokens.bin)" in notes


def test_an_https_connection_without_a_url_reads_as_a_download():
    from gpumemlab.planner.offline import describe
    assert describe(["linqs-data.soe.ucsc.edu:443"]).startswith(
        "the script tried to download from linqs-data.soe.ucsc.edu (port 443); the planner runs "
        "offline")
    assert describe(["192.0.2.10:8080", "192.0.2.10:8080"]).startswith(
        "the script tried to connect to 192.0.2.10:8080; the planner")
