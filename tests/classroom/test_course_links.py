"""``gpumemlab course link``: each link, parsed back with urllib.parse, asks nbgitpuller for the
right repository, branch and notebook (``gpumemlab/classroom/links.py``), for every lesson in
notebooks/; bad hubs, repositories, branches and lessons are one-line errors."""
from __future__ import annotations

import pathlib
from urllib.parse import parse_qs, unquote, urlsplit

import pytest

from gpumemlab.classroom.links import LinkError, clone_dir, lesson_links, pull_link
from gpumemlab.cli import main

ROOT = pathlib.Path(__file__).resolve().parents[2]
LESSONS = sorted(p.name for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
HUB = "https://hub.example.edu"
REPO = "https://github.com/example-course/gpumemlab"


def _parse(url):
    parts = urlsplit(url)
    query = parse_qs(parts.query, strict_parsing=True)
    assert all(len(v) == 1 for v in query.values()), query
    return parts, {k: v[0] for k, v in query.items()}


def _lines(capsys):
    return capsys.readouterr().out.splitlines()


def test_one_link_per_lesson_each_opening_that_lesson(capsys):
    assert len(LESSONS) >= 15
    assert main(["course", "link", "--hub", HUB, "--repo", REPO]) == 0
    lines = _lines(capsys)
    assert [line.split("  ")[0] for line in lines] == LESSONS
    for line, notebook in zip(lines, LESSONS):
        parts, query = _parse(line.split("  ")[1])
        assert (parts.scheme, parts.netloc, parts.path) == ("https", "hub.example.edu",
                                                            "/hub/user-redirect/git-pull")
        assert query == {"repo": REPO, "branch": "main",
                         "urlpath": f"lab/tree/gpumemlab/notebooks/{notebook}"}


def test_lessons_branch_app_and_a_hub_under_a_path(capsys):
    assert main(["course", "link", "--hub", "https://example.edu/jupyter/", "--repo",
                 REPO + "/", "--branch", "spring-2027", "--app", "notebook",
                 "--lesson", "16", "2", "--lesson", "03_reading_the_evidence"]) == 0
    lines = _lines(capsys)
    assert [line.split("  ")[0] for line in lines] == [
        "02_fragmentation.ipynb", "03_reading_the_evidence.ipynb", "16_will_it_fit.ipynb"]
    parts, query = _parse(lines[-1].split("  ")[1])
    assert parts.path == "/jupyter/hub/user-redirect/git-pull"
    assert query == {"repo": REPO, "branch": "spring-2027",
                     "urlpath": "tree/gpumemlab/notebooks/16_will_it_fit.ipynb"}


def test_the_clone_folder_is_the_one_nbgitpuller_makes():
    # nbgitpuller clones into repo.rstrip('/').split('/')[-1]: a .git suffix stays
    assert clone_dir("https://git.example.edu/course/gpumemlab.git") == "gpumemlab.git"
    _, query = _parse(pull_link(HUB, "https://git.example.edu/course/gpumemlab.git",
                                "notebooks/01_why_a_cache.ipynb"))
    assert query["urlpath"] == "lab/tree/gpumemlab.git/notebooks/01_why_a_cache.ipynb"
    assert "targetpath" not in query
    _, query = _parse(pull_link(HUB, REPO, "notebooks/01_why_a_cache.ipynb",
                                target_path="courses/gml"))
    assert query["targetpath"] == "courses/gml"
    assert query["urlpath"] == "lab/tree/courses/gml/notebooks/01_why_a_cache.ipynb"


def test_characters_that_need_encoding_survive_both_levels():
    """urlpath is a path on the user's server (percent-encoded there) carried as a query value
    (percent-encoded again): decoding both gives back the folder and the branch."""
    url = pull_link(HUB, "https://git.example.edu/my%20course&x=1", "notebooks/a b#c.ipynb",
                    branch="team/a+b")
    _, query = _parse(url)
    assert query["repo"] == "https://git.example.edu/my%20course&x=1"
    assert query["branch"] == "team/a+b"
    assert unquote(query["urlpath"]) == "lab/tree/my%20course&x=1/notebooks/a b#c.ipynb"
    assert "#" not in url and " " not in url


@pytest.mark.parametrize("flag,value,words", [
    ("--hub", "hub.example.edu", "http(s) URL"),
    ("--hub", "ftp://hub.example.edu", "http(s) URL"),
    ("--hub", "https://", "http(s) URL"),
    ("--hub", "https://hub.example.edu/?next=/x", "?query"),
    ("--hub", "https://hub.example.edu:http/", "not a valid URL"),
    ("--repo", "git@github.com:example/gpumemlab.git", "http(s) URL"),
    ("--repo", "https://github.com", "name a repository"),
    ("--repo", "https://user:token@github.com/example/gpumemlab", "password"),
    ("--repo", "https://github.com/example/gpu memlab", "without spaces"),
    ("--branch", "-f", "branch name"),
    ("--branch", "a..b", "branch name"),
    ("--lesson", "99", "no lesson '99'"),
    ("--lesson", "fragmentation", "no lesson"),
    ("--target-path", "../elsewhere", "--target-path"),
    ("--target-path", "/home/other", "--target-path"),
])
def test_bad_input_is_one_line_and_prints_no_link(capsys, flag, value, words):
    args = {"--hub": HUB, "--repo": REPO, flag: value}
    argv = ["course", "link"] + [f"{k}={v}" for k, v in args.items()]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("gpumemlab course: error:") and words in err[0], err


def test_without_notebooks_it_says_where_it_looked(tmp_path, capsys):
    assert main(["course", "link", "--hub", HUB, "--repo", REPO,
                 "--notebooks", str(tmp_path)]) == 2
    assert f"no lesson notebooks (NN_topic.ipynb) in {tmp_path}" in capsys.readouterr().err


def test_a_notebooks_folder_given_is_the_one_read(tmp_path):
    (tmp_path / "07_mine.ipynb").write_text("{}")
    (tmp_path / "notes.ipynb").write_text("{}")
    links = lesson_links(HUB, REPO, notebooks=tmp_path)
    assert [(item.lesson, item.notebook) for item in links] == [("07", "07_mine.ipynb")]
    with pytest.raises(LinkError, match="the lessons are 07"):
        lesson_links(HUB, REPO, lessons=["01"], notebooks=tmp_path)


def test_the_jupyter_servers_own_query_parser_reads_the_same_values():
    """nbgitpuller reads its parameters with tornado's get_argument, which parses the query with
    tornado.httputil.parse_qs_bytes: the links must read the same there."""
    httputil = pytest.importorskip("tornado.httputil")
    url = pull_link("https://example.edu/jupyter", "https://git.example.edu/a%20b&c.git",
                    "notebooks/02_fragmentation.ipynb", branch="x+y")
    args = {k: [v.decode() for v in vs]
            for k, vs in httputil.parse_qs_bytes(urlsplit(url).query).items()}
    # the clone folder is "a%20b&c.git", written as a URL path on the user's server
    assert args == {"repo": ["https://git.example.edu/a%20b&c.git"], "branch": ["x+y"],
                    "urlpath": ["lab/tree/a%2520b%26c.git/notebooks/02_fragmentation.ipynb"]}
    url = pull_link(HUB, REPO, "notebooks/02_fragmentation.ipynb", target_path="course-1/gml")
    args = httputil.parse_qs_bytes(urlsplit(url).query)
    assert args["targetpath"] == [b"course-1/gml"]
    assert args["urlpath"] == [b"lab/tree/course-1/gml/notebooks/02_fragmentation.ipynb"]
