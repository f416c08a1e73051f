"""Reading an untrusted file by its size: never more than a cap, never blocking on a device.

A path handed to the kit may name anything: ``/dev/zero`` (never ends), a FIFO (may never
start), a terminal, or a regular file that grows while it is read. The file is opened with
``O_NONBLOCK`` (so opening a FIFO or a device returns at once), checked with ``fstat`` on that
same descriptor (no race between the check and the read), refused unless it is a regular file,
and read for its own size plus one byte: the buffer is the file's size, not the cap (asking for
the cap first reserves gigabytes, which fails under an address-space limit such as
``ulimit -v``). A file that grew while being read is read on in 1 MiB chunks up to the cap.
"""
from __future__ import annotations

import os
import stat

_CHUNK = 1 << 20
_FLAGS = (os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
          | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0))


def read_regular_file(name: str, max_bytes: int, error, what: str = "file",
                      hint: str = "") -> bytes:
    """The bytes of the regular file ``name`` (at most ``max_bytes``); every problem raises
    ``error(message)`` with one line naming the file. ``what`` names the kind of file expected
    ("snapshot file"); ``hint`` is added to the too-large message."""
    try:
        fd = os.open(name, _FLAGS)
    except FileNotFoundError:
        raise error(f"{name}: no such file") from None
    except IsADirectoryError:
        raise error(f"{name}: is a directory, not a {what}") from None
    except OSError as exc:
        raise error(f"{name}: cannot read ({exc.strerror or exc})") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise error(f"{name}: is a directory, not a {what}")
        if not stat.S_ISREG(st.st_mode):   # /dev/zero never ends, a FIFO may never start
            raise error(f"{name}: is not a regular file (a device, FIFO or socket), not a {what}")
        if st.st_size > max_bytes:
            raise error(f"{name}: {st.st_size} bytes is larger than the {max_bytes}-byte "
                        f"limit{hint}")
        parts, total, want = [], 0, st.st_size + 1
        while True:
            # the file's size plus one byte first (the one byte sees growth), then chunks
            size = want - total if total < want else _CHUNK
            chunk = os.read(fd, min(size, max_bytes + 1 - total))
            if not chunk:
                break
            parts.append(chunk)
            total += len(chunk)
            if total > max_bytes:   # it grew while being read
                raise error(f"{name}: larger than the {max_bytes}-byte limit{hint}")
    except OSError as exc:
        raise error(f"{name}: cannot read ({exc.strerror or exc})") from None
    finally:
        os.close(fd)
    return parts[0] if len(parts) == 1 else b"".join(parts)
