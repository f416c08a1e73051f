"""Compare two snapshots by allocation site: which code holds more memory in B than in A.

A site is the culprit frame of a live block (``frames.culprit_frame``: the user's code, not
PyTorch's); blocks recorded without frames count under "(no frames recorded)". Bytes are block
sizes of ``active_allocated`` and ``active_pending_free`` blocks, i.e. what the allocator could
not hand out.
"""
from __future__ import annotations

from gpumemlab.units import format_size

from .frames import frame_text

__all__ = ["site_bytes", "site_diff", "diff_text"]


def site_bytes(snapshot: dict) -> dict:
    """site -> [bytes, blocks] over every live block of every segment."""
    out = {}
    for seg in snapshot.get("segments", ()):
        for b in seg["blocks"]:
            if b["state"] == "inactive":
                continue
            row = out.setdefault(frame_text(b.get("frames")), [0, 0])
            row[0] += b["size"]
            row[1] += 1
    return out


def site_diff(a: dict, b: dict) -> dict:
    """``{"grew", "shrank", "new", "gone", "total_a", "total_b"}``; each list holds
    ``(site, bytes in A, bytes in B, blocks in A, blocks in B)``, largest change first."""
    sa, sb = site_bytes(a), site_bytes(b)
    rows = {"grew": [], "shrank": [], "new": [], "gone": []}
    for site in sa.keys() | sb.keys():
        (ab, an), (bb, bn) = sa.get(site, (0, 0)), sb.get(site, (0, 0))
        row = (site, ab, bb, an, bn)
        if site not in sa:
            rows["new"].append(row)
        elif site not in sb:
            rows["gone"].append(row)
        elif bb > ab:
            rows["grew"].append(row)
        elif bb < ab:
            rows["shrank"].append(row)
    for key in rows:
        rows[key].sort(key=lambda r: (-abs(r[2] - r[1]), r[0]))
    rows["total_a"] = sum(v[0] for v in sa.values())
    rows["total_b"] = sum(v[0] for v in sb.values())
    return rows


def diff_text(d: dict, name_a: str = "A", name_b: str = "B", top: int = 15) -> str:
    total = d["total_b"] - d["total_a"]
    out = [f"live memory: {format_size(d['total_a'])} in {name_a}, {format_size(d['total_b'])} in "
           f"{name_b} ({'+' if total >= 0 else '-'}{format_size(abs(total))})"]
    titles = {"grew": "grew", "shrank": "shrank", "new": f"new in {name_b}",
              "gone": f"gone from {name_b}"}
    for key, title in titles.items():
        rows = d[key]
        out.append(f"{title}: {len(rows)} sites")
        for site, ab, bb, an, bn in rows[:top]:
            delta = bb - ab
            out.append(f"  {'+' if delta >= 0 else '-'}{format_size(abs(delta)):>12}  "
                       f"{format_size(ab):>12} -> {format_size(bb):<12} "
                       f"({an} -> {bn} blocks)  {site}")
        if len(rows) > top:
            out.append(f"  ... and {len(rows) - top} more")
    return "\n".join(out)
