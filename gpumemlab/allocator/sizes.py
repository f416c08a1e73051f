"""c10's ``format_size`` (c10/util, used by the OOM message): the allocator's own size printer."""


def format_size(size: int) -> str:
    """Format a byte count exactly as c10's ``format_size``: 2 decimals; bytes up to and
    including 1024, KiB up to 1 MiB, MiB up to 1 GiB, then GiB."""
    if size <= 1024:
        return f"{size} bytes"
    if size <= 1048576:
        return f"{size / 1024.0:.2f} KiB"
    if size <= 1073741824:
        return f"{size / 1048576.0:.2f} MiB"
    return f"{size / 1073741824.0:.2f} GiB"
