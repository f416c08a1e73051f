"""nbgitpuller links: one link per lesson notebook, for a course run on a JupyterHub.

nbgitpuller (a JupyterHub server extension) turns a link of the form

    {hub}/hub/user-redirect/git-pull?repo=GIT_URL&branch=B&urlpath=lab/tree/<clone dir>/notebooks/NN_topic.ipynb

into: log the student in, clone the repository into their home (or, on later clicks, merge the
course's new commits into their copy without overwriting their edits), then open the notebook.
Its documented parameters are ``repo``, ``branch``, ``urlpath`` (where to go afterwards,
relative to the user's server: ``lab/tree/<path>`` for JupyterLab, ``tree/<path>`` for the
classic Notebook) and ``targetpath`` (the folder to clone into).

The clone folder is what nbgitpuller itself picks when no ``targetpath`` is given: the last
part of the repository URL, trailing slashes dropped and a ``.git`` suffix kept (its server
code does ``repo.rstrip('/').split('/')[-1]``; its web link generator strips ``.git``, which
then points at a folder that does not exist). ``target_path`` sets the folder explicitly.

Pure string work: nothing here touches the network or imports torch.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, urlencode, urlsplit

APPS = {"lab": "lab/tree/", "notebook": "tree/"}
DEFAULT_BRANCH = "main"
LESSON_GLOB = "[0-9][0-9]_*.ipynb"
_CONTROL_OR_SPACE = re.compile(r"[\x00-\x20\x7f]")
# What git check-ref-format refuses in a branch name (besides control characters and space).
_BAD_BRANCH = re.compile(r"[~^:?*\[\\]|\.\.|@\{|//|^[-/.]|[/.]$|\.lock$|^@$")


_HOST = re.compile(r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*"
                   r"[A-Za-z0-9])?)*\.?|\[[0-9A-Fa-f:.]+\])(?::[0-9]{1,5})?")


class LinkError(ValueError):
    """A bad hub, repository, branch, folder or lesson: one line saying which and why."""


@dataclass(frozen=True)
class LessonLink:
    lesson: str          # "03"
    notebook: str        # "03_reading_the_evidence.ipynb"
    url: str


def _http_url(what: str, text: str) -> str:
    """``text`` without trailing slashes, once it is a plain http(s) address that a browser
    (the WHATWG URL standard) reads as Python does: ``scheme://host[:port]/path``, no backslash
    (a browser reads ``\\`` as ``/`` in an http address, so ``https://evil.example\\.hub.edu``
    goes to evil.example), no user name, and a host of letters, digits, dots and hyphens (or
    a bracketed IPv6 address): no percent-escapes a browser would decode into another host."""
    if not text or _CONTROL_OR_SPACE.search(text):
        raise LinkError(f"{what} must be an http(s) URL without spaces, got {text!r}")
    if "\\" in text:
        raise LinkError(f"{what} must not hold a backslash (a browser reads it as '/'), "
                        f"got {text!r}")
    try:
        parts = urlsplit(text)
        parts.port            # raises ValueError on a port that is not a number
    except ValueError as exc:
        raise LinkError(f"{what} {text!r} is not a valid URL: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise LinkError(f"{what} must be an http(s) URL like https://host/..., got {text!r}")
    if parts.username is not None or parts.password is not None:
        raise LinkError(f"{what} must not hold a user name or password: every student would "
                        f"get them in the link")
    if parts.query or parts.fragment or text.endswith(("?", "#")):
        raise LinkError(f"{what} must not have a ?query or #fragment, got {text!r}")
    if not re.match(r"(?i)https?://", text):   # "https:host" is a host to a browser
        raise LinkError(f"{what} must be an http(s) URL like https://host/..., got {text!r}")
    authority = re.split(r"[/?#]", text.split("://", 1)[1], 1)[0]
    if "@" in authority:
        raise LinkError(f"{what} must not hold a user name or password: every student would "
                        f"get them in the link")
    if not _HOST.fullmatch(authority):
        raise LinkError(f"{what} {text!r} does not have a plain host name (letters, digits, "
                        f"'.', '-', an optional :port)")
    return text.rstrip("/")


def hub_url(text: str) -> str:
    """The hub's address (with its path prefix, if any), checked."""
    return _http_url("--hub", text)


def repo_url(text: str) -> str:
    """The course repository's address, checked; it must name a repository."""
    url = _http_url("--repo", text)
    if not urlsplit(url).path.strip("/"):
        raise LinkError(f"--repo must name a repository (https://host/owner/name), got {text!r}")
    return url


def check_branch(branch: str) -> str:
    if not branch or _CONTROL_OR_SPACE.search(branch) or _BAD_BRANCH.search(branch):
        raise LinkError(f"--branch {branch!r} is not a valid git branch name")
    return branch


def clone_dir(repo: str, target_path: str | None = None) -> str:
    """The folder nbgitpuller clones ``repo`` into, relative to the user's home."""
    if target_path is None:
        return repo_url(repo).rsplit("/", 1)[-1]
    parts = target_path.strip("/").split("/")
    if (target_path.startswith("/") or _CONTROL_OR_SPACE.search(target_path)
            or any(p in ("", ".", "..") for p in parts)):
        raise LinkError(f"--target-path must be a relative folder without '..' or spaces, "
                        f"got {target_path!r}")
    return "/".join(parts)


def pull_link(hub: str, repo: str, path: str, branch: str = DEFAULT_BRANCH, app: str = "lab",
              target_path: str | None = None) -> str:
    """The nbgitpuller link that clones ``repo`` and opens ``path`` (relative to the clone)."""
    if app not in APPS:
        raise LinkError(f"--app must be one of {', '.join(APPS)}, got {app!r}")
    base, repo = hub_url(hub), repo_url(repo)
    folder = clone_dir(repo, target_path)
    params = {"repo": repo, "branch": check_branch(branch),
              # the path part of a URL on the user's server: each segment percent-encoded there,
              # and the whole of it percent-encoded again as a query value here
              "urlpath": APPS[app] + quote(f"{folder}/{path.lstrip('/')}", safe="/")}
    if target_path is not None:
        params["targetpath"] = folder
    # '/' and ':' may stay as they are in a query (RFC 3986), which keeps the link readable;
    # everything else that is not plain is percent-encoded
    return f"{base}/hub/user-redirect/git-pull?" + urlencode(params, quote_via=quote, safe="/:")


def notebooks_dir(explicit=None, cwd=None) -> Path:
    """The folder holding the lesson notebooks (``NN_topic.ipynb``): ``explicit`` when given,
    else ``notebooks/`` of the checkout this package was imported from, else ``notebooks/`` in
    ``cwd``. A wheel does not ship the notebooks, hence the search and the clear error."""
    if explicit is not None:
        candidates = [Path(explicit)]
    else:
        candidates = [Path(__file__).resolve().parents[2] / "notebooks",
                      Path(cwd or Path.cwd()) / "notebooks"]
    for folder in candidates:
        if folder.is_dir() and any(folder.glob(LESSON_GLOB)):
            return folder
    looked = " or ".join(str(c) for c in dict.fromkeys(candidates))
    hint = ("" if explicit is not None
            else ": run this in a gpumemlab checkout or pass --notebooks DIR")
    raise LinkError(f"no lesson notebooks (NN_topic.ipynb) in {looked}{hint}")


def lesson_notebooks(folder) -> dict:
    """{"03": "03_reading_the_evidence.ipynb", ...} in lesson order."""
    return {p.name[:2]: p.name for p in sorted(Path(folder).glob(LESSON_GLOB)) if p.is_file()}


def _lesson_key(text: str, known: dict) -> str:
    """'3', '03', '03_reading_the_evidence' or its .ipynb name -> '03'."""
    name = str(text).strip()
    key = name.zfill(2) if re.fullmatch(r"\d{1,2}", name) else next(
        (k for k, nb in known.items() if name in (nb, nb.removesuffix(".ipynb"))), None)
    if key not in known:
        raise LinkError(f"no lesson {text!r}: the lessons are {', '.join(known)}")
    return key


def lesson_links(hub: str, repo: str, lessons=(), branch: str = DEFAULT_BRANCH,
                 app: str = "lab", target_path: str | None = None,
                 notebooks=None) -> list:
    """One ``LessonLink`` per lesson asked for (every lesson when ``lessons`` is empty), in
    lesson order. Everything is checked before any link is made."""
    known = lesson_notebooks(notebooks_dir(notebooks))
    keys = {_lesson_key(n, known) for n in lessons} or set(known)
    return [LessonLink(k, known[k], pull_link(hub, repo, f"notebooks/{known[k]}", branch=branch,
                                              app=app, target_path=target_path))
            for k in sorted(keys)]
