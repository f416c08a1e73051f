"""No network while ``gpumemlab plan`` runs a script: a download is refused at once and said.

A script that fetches its data set or a tokeniser's vocabulary (``urllib.request.urlopen``,
``requests``, ``torch.hub``, ``socket.create_connection``) would, on a machine without network,
wait for a name lookup or a connection to time out, then stop on an error that names neither the
download nor the planner. Here every internet-family connection and every name lookup made while
the script runs is refused on the spot with ``OSError(ENETUNREACH)``, which is what an offline
machine gives (urllib wraps it in ``URLError``, requests in ``ConnectionError``, as they would
there), and the attempt is remembered so that the plan can say *what* the script tried to fetch.

It follows Python's audit events (PEP 578, ``sys.addaudithook``): ``urllib.Request`` (the URL,
remembered, not refused: a ``file:`` URL is local), ``socket.getaddrinfo`` and
``socket.gethostbyname`` (a name lookup: refused), ``socket.connect`` and ``socket.sendto`` on an
``AF_INET``/``AF_INET6`` socket (refused, loopback included: a proxy on loopback would otherwise
carry the download). Unix sockets (a ``DataLoader``'s workers, ``multiprocessing``) are left
alone. An audit hook cannot be removed, so it is added once per process and does nothing while
no ``offline()`` block is open; the planning process is a fresh one for each script.
"""
from __future__ import annotations

import contextlib
import errno
import socket
import sys
import urllib.parse

__all__ = ["offline", "OfflineError", "describe", "hint"]

_state = {"on": False, "hooked": False, "urls": [], "refused": []}

_INET = (socket.AF_INET, socket.AF_INET6)


class OfflineError(OSError):
    """Network refused by the planner (an ``OSError`` with ``ENETUNREACH``, as offline)."""

    def __init__(self, what: str):
        super().__init__(errno.ENETUNREACH, f"gpumemlab plan runs offline: {what} refused")


def _host_of(url: str):
    try:
        return urllib.parse.urlsplit(url).hostname
    except ValueError:
        return None


def _target(host, port) -> str:
    """The URL urllib asked for with this host, else ``host:port``."""
    for url in reversed(_state["urls"]):
        if host is not None and _host_of(url) == str(host).lower():
            return url
    return f"{host}:{port}" if port is not None else str(host)


def _refuse(host, port):
    what = _target(host, port)
    _state["refused"].append(what)
    raise OfflineError(what)


def _hook(event, args):
    if not _state["on"]:
        return
    if event == "urllib.Request":
        if str(args[0]).split(":", 1)[0].lower() not in ("file", "data"):
            _state["urls"].append(str(args[0]))
    elif event in ("socket.getaddrinfo", "socket.gethostbyname"):
        host = args[0]
        if host is not None:            # None: an address to bind to, no lookup
            _refuse(host.decode() if isinstance(host, bytes) else host,
                    args[1] if event == "socket.getaddrinfo" else None)
    elif event in ("socket.connect", "socket.sendto"):
        sock, address = args[0], args[-1]
        if getattr(sock, "family", None) in _INET and isinstance(address, tuple):
            _refuse(address[0], address[1] if len(address) > 1 else None)


@contextlib.contextmanager
def offline():
    """Refuse the network for the duration; yields the list of what was refused (URLs, or
    ``host:port`` where no URL was asked for), in order."""
    if not _state["hooked"]:
        sys.addaudithook(_hook)
        _state["hooked"] = True
    _state.update(on=True, urls=[], refused=[])
    try:
        yield _state["refused"]
    finally:
        _state["on"] = False


# what to do, for the hosts that scripts download from without saying so (a library fetching a
# vocabulary or weights on first use, into a cache of its own that an offline run reads)
_HINTS = (
    (("openaipublic.blob.core.windows.net",),
     "tiktoken fetching its vocabulary: run it once online with TIKTOKEN_CACHE_DIR set to a "
     "folder, then plan with TIKTOKEN_CACHE_DIR set to that folder"),
    (("huggingface.co", "hf.co"),
     "the Hugging Face Hub: download the model or data set once online (into HF_HOME's cache), "
     "then plan with HF_HUB_OFFLINE=1"),
    (("download.pytorch.org",),
     "torch.hub or torchvision weights: put the file in $TORCH_HOME/hub/checkpoints (default "
     "~/.cache/torch/hub/checkpoints)"),
)


def hint(refused: list) -> str:
    """What to do about the first refused address: the library's cache where a known host is
    named, else give the script the file."""
    first = refused[0]
    host = (_host_of(first) if "://" in first else first.rpartition(":")[0] or first) or ""
    for hosts, text in _HINTS:
        if any(host == h or host.endswith("." + h) for h in hosts):
            return f" ({text})"
    return " (download the file once elsewhere and give the script its local path)"


def describe(refused: list) -> str:
    """The plan's one line for a script that stopped after a refused download (the place it
    stopped and ``hint`` follow it)."""
    first = refused[0]
    host, _, port = first.rpartition(":")
    if "://" in first:
        verb = "download"
    elif port in ("80", "443"):      # an HTTP(S) client that names no URL to audit (requests)
        verb, first = "download from", f"{host} (port {port})"
    else:
        verb = "connect to"
    more = f" (and {len(set(refused)) - 1} more)" if len(set(refused)) > 1 else ""
    return (f"the script tried to {verb} {first}{more}; the planner runs offline: "
            f"give it local data")
