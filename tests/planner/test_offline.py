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
                          "<module> (download the file once elsewhere and give the script its "
                          "local path)"), r["error"]
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


def test_a_known_library_download_says_what_to_do(library):
    # llm.c's train_gpt2.py stops so at tiktoken.get_encoding("gpt2")
    run, r, script = _plan("fetches_a_vocabulary.py", timeout=120)
    assert run.returncode == 2 and r["fits"] is None
    assert r["error"] == (
        "the script tried to download from openaipublic.blob.core.windows.net (port 443); the "
        "planner runs offline: give it local data at fetches_a_vocabulary.py:10 in <module> "
        "(tiktoken fetching its vocabulary: run it once online with TIKTOKEN_CACHE_DIR set to a "
        "folder, then plan with TIKTOKEN_CACHE_DIR set to that folder)"), r["error"]
    assert "Traceback" not in run.stderr


def test_the_hint_names_the_cache_of_the_host():
    from gpumemlab.planner.offline import hint
    assert "HF_HUB_OFFLINE=1" in hint(["https://huggingface.co/gpt2/resolve/main/config.json"])
    assert "HF_HUB_OFFLINE=1" in hint(["cdn-lfs.huggingface.co:443"])
    assert "hub/checkpoints" in hint(["https://download.pytorch.org/models/resnet18.pth"])
    assert hint(["notpytorch.org:443"]).startswith(" (download the file once elsewhere")
