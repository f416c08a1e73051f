"""Late submissions: a due date, a policy, and the penalty they give.

nbgrader's grades CSV has a ``late_submission_penalty`` column (``score = raw_score - penalty``);
this module fills it. A policy is a due date plus three numbers:

* ``grace_s``: a submission at most this many seconds after the due date counts as on time;
* ``per_day``: past the grace period, each started day (24 h, counted from the due date) costs
  this fraction of the assignment's maximum score;
* ``cap``: the penalty never exceeds this fraction of the maximum score (and never the raw score:
  a score does not go below zero).

Times are ISO 8601 (``2026-12-01T17:00:00+01:00``, ``2026-12-01 16:00``, nbgrader's
``2026-12-01 16:00:00.123456 UTC``, Gradescope's ``created_at``). A time without a zone is UTC. A
due date given as a date alone means the end of that day (23:59:59). Every parser takes untrusted
text (a student's ``timestamp.txt``, Gradescope's metadata) and raises ``ValueError`` with one line.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, timezone

DAY_S = 86400
TEXT_LIMIT = 64
_ZONE_NAMES = re.compile(r"\s*(?:UTC|GMT|Z)$", re.IGNORECASE)
# nbgrader writes ``timestamp.txt`` with ``%Z``: the configured zone's abbreviation. These are
# the abbreviations with one meaning (CST is read as US Central, the one nbgrader's users meet);
# any other name is refused rather than guessed.
_NAMED = {"EST": -5, "EDT": -4, "CST": -6, "CDT": -5, "MST": -7, "MDT": -6, "PST": -8,
          "PDT": -7, "AKST": -9, "AKDT": -8, "HST": -10, "WET": 0, "WEST": 1, "BST": 1,
          "CET": 1, "CEST": 2, "MET": 1, "MEST": 2, "EET": 2, "EEST": 3, "MSK": 3, "JST": 9,
          "KST": 9, "AWST": 8, "ACST": 9.5, "ACDT": 10.5, "AEST": 10, "AEDT": 11,
          "NZST": 12, "NZDT": 13}
_NAMED_ZONE = re.compile(r"\s+([A-Za-z]{2,5})$")
_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*(s|m|min|h|d)?", re.IGNORECASE)
_UNIT_S = {"s": 1, "m": 60, "min": 60, "h": 3600, "d": DAY_S, None: 60}


@dataclass(frozen=True)
class LatePolicy:
    due: datetime          # aware
    per_day: float = 0.0   # fraction of the maximum score per started day late
    cap: float = 1.0       # largest fraction of the maximum score the penalty may take
    grace_s: float = 0.0

    def describe(self) -> str:
        text = f"due {format_time(self.due)}"
        if self.grace_s:
            text += f", grace {format_duration(self.grace_s)}"
        if self.per_day:
            text += f", {_percent(self.per_day)} of the maximum per day late"
            if self.cap < 1:
                text += f" (at most {_percent(self.cap)})"
        else:
            text += ", no late penalty"
        return text


@dataclass(frozen=True)
class Lateness:
    penalty: float = 0.0      # points taken off the raw score
    late_s: float = 0.0       # seconds past the due date (0 when on time)
    days: int = 0             # started days counted for the penalty
    submitted: datetime = None
    text: str = ""            # one line for the feedback; "" when on time or nothing to say


def _percent(fraction: float) -> str:
    return f"{fraction * 100:g}%"


def _clean(text, what: str) -> str:
    if not isinstance(text, str):
        raise ValueError(f"{what} must be text, not {type(text).__name__}")
    text = text.strip()
    if not text:
        raise ValueError(f"{what} is empty")
    if len(text) > TEXT_LIMIT or not text.isprintable():
        raise ValueError(f"{what} {text[:TEXT_LIMIT]!r}... is not a date and time"
                         if len(text) > TEXT_LIMIT else f"{what} {text!r} is not printable text")
    return text


def parse_time(text, what: str = "time") -> datetime:
    """An aware datetime from ISO 8601 text; a time without a zone is UTC."""
    text = _clean(text, what)
    body = _ZONE_NAMES.sub("", text)
    zone = timezone.utc if body != text else None
    named = _NAMED_ZONE.search(body) if zone is None else None
    if named:
        hours = _NAMED.get(named.group(1).upper())
        if hours is None:
            raise ValueError(f"{what} {text!r} names the time zone {named.group(1)!r}, which "
                             f"this grader does not read (an offset such as +01:00 is read)")
        body, zone = body[:named.start()], timezone(timedelta(hours=hours))
    try:
        moment = datetime.fromisoformat(body)
    except ValueError:
        raise ValueError(f"{what} {text!r} is not an ISO 8601 date and time "
                         f"(e.g. 2026-12-01T17:00:00+01:00)") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=zone or timezone.utc)
    elif named:
        raise ValueError(f"{what} {text!r} has two time zones")
    elif zone is not None and moment.utcoffset() != timedelta(0):
        raise ValueError(f"{what} {text!r} has two time zones")
    return moment


def parse_due(text) -> datetime:
    """A due date: a full time, or a date alone meaning the end of that day (UTC)."""
    cleaned = _clean(text, "due date")
    try:
        day = date.fromisoformat(cleaned)
    except ValueError:
        return parse_time(cleaned, "due date")
    return datetime.combine(day, time(23, 59, 59), tzinfo=timezone.utc)


def parse_fraction(text, what: str) -> float:
    """``0.1``, ``10%``: a fraction between 0 and 1."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value = float(text)
    else:
        raw = _clean(str(text), what)
        try:
            value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
        except ValueError:
            raise ValueError(f"{what} {raw!r} is not a fraction (0.1) or a percentage "
                             f"(10%)") from None
    if not (math.isfinite(value) and 0 <= value <= 1):
        raise ValueError(f"{what} must be between 0 and 1 (0% and 100%), got {value:g}")
    return value


def parse_duration(text, what: str = "grace") -> float:
    """``15m``, ``2h``, ``1d``, ``90s``; a bare number is minutes. -> seconds."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        seconds = float(text) * 60
    else:
        raw = _clean(str(text), what)
        m = _DURATION.fullmatch(raw)
        if not m:
            raise ValueError(f"{what} {raw!r} is not a duration such as 15m, 2h or 1d")
        seconds = float(m.group(1)) * _UNIT_S[m.group(2) and m.group(2).lower()]
    if not (math.isfinite(seconds) and 0 <= seconds <= 365 * DAY_S):
        raise ValueError(f"{what} must be between 0 and 365 days")
    return seconds


def policy_numbers(per_day=None, cap=None, grace=None) -> dict:
    """A policy's numbers from command-line or metadata text (None or "": the default):
    ``{"per_day": 0.0, "cap": 1.0, "grace_s": 0.0}`` by default; ValueError for bad text."""
    def given(x):
        return x not in (None, "")
    return {"per_day": parse_fraction(per_day, "late penalty per day") if given(per_day)
            else 0.0,
            "cap": parse_fraction(cap, "late penalty cap") if given(cap) else 1.0,
            "grace_s": parse_duration(grace) if given(grace) else 0.0}


def policy_from_args(due=None, per_day=None, cap=None, grace=None):
    """A LatePolicy from command-line or metadata text; None when there is no due date."""
    if due is None or due == "":
        if any(x not in (None, "") for x in (per_day, cap, grace)):
            raise ValueError("a late policy (per day, cap, grace) needs a due date")
        return None
    due = parse_due(due) if not isinstance(due, datetime) else due
    return LatePolicy(due, **policy_numbers(per_day, cap, grace))


def format_time(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def format_duration(seconds: float) -> str:
    seconds = int(round(seconds))
    days, rest = divmod(seconds, DAY_S)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{days} d"] * bool(days) + [f"{hours} h"] * bool(hours) + \
        [f"{minutes} min"] * bool(minutes)
    return " ".join(parts) or f"{secs} s"


def late_penalty(policy, submitted, raw_score: float, max_score: float) -> Lateness:
    """The penalty for a submission at ``submitted`` (None: unknown, no penalty)."""
    if policy is None:
        return Lateness(submitted=submitted)
    if submitted is None:
        return Lateness(text="no submission time was found; no late penalty was applied")
    late_s = (submitted - policy.due).total_seconds()
    if late_s <= 0:
        return Lateness(submitted=submitted)
    when = f"submitted {format_time(submitted)}, {format_duration(late_s)} after the due date"
    if late_s <= policy.grace_s:
        return Lateness(0.0, late_s, 0, submitted, f"{when}: within the grace period, no "
                                                   f"penalty")
    days = math.ceil(late_s / DAY_S)
    fraction = min(policy.per_day * days, policy.cap)
    penalty = min(fraction * max_score, max(raw_score, 0.0))
    if not policy.per_day:
        return Lateness(0.0, late_s, days, submitted, f"{when} (no late penalty is set)")
    return Lateness(penalty, late_s, days, submitted,
                    f"{when}: {days} day{'s' * (days != 1)} late, {_percent(fraction)} of the "
                    f"maximum, -{penalty:g} point{'s' * (penalty != 1)}")


MTIME_NOTE = ("no timestamp.txt: the submission time is the notebook file's modification "
              "time, which whoever copied the file could have set")


def submission_time(stamp_text: str, notebook=None):
    """When a submission was handed in: its ``timestamp.txt`` (nbgrader's), else the notebook
    file's modification time (never following a link), said so in the note. A ``timestamp.txt``
    that does not parse gives no time (the note says why, in one line): the file time is not
    used in its place, since a student may have written either. -> (datetime or None, note)."""
    import os

    if stamp_text:
        try:
            return parse_time(stamp_text, "timestamp.txt"), ""
        except ValueError as exc:
            return None, f"{exc}: no late penalty was computed; the teacher decides"
    if notebook is not None:
        try:
            mtime = os.lstat(notebook).st_mtime
        except OSError:
            return None, "no submission time was found"
        return datetime.fromtimestamp(mtime, timezone.utc), MTIME_NOTE
    return None, "no submission time was found"


def policy_from_metadata(nb_metadata) -> dict:
    """The late policy a source notebook may carry: ``metadata.gpumemlab.late`` =
    ``{"due": ..., "per_day": ..., "cap": ..., "grace": ...}`` (the command line overrides)."""
    late = (nb_metadata or {}).get("gpumemlab", {}).get("late") or {}
    if not isinstance(late, dict):
        raise ValueError("metadata.gpumemlab.late must be a mapping with due, per_day, cap, "
                         "grace")
    unknown = set(late) - {"due", "per_day", "cap", "grace"}
    if unknown:
        raise ValueError(f"metadata.gpumemlab.late has unknown keys: {', '.join(sorted(unknown))}")
    return dict(late)


def apply_late(result, policy, notebook=None) -> object:
    """Set a ``grade.StudentResult``'s ``penalty`` and ``late_text`` from ``policy`` (None: leave
    it as it is); the notebook's file time stands in for a missing ``timestamp.txt``."""
    if policy is None:
        return result
    when, note = submission_time(result.timestamp, notebook)
    lateness = late_penalty(policy, when, result.score, result.max_score)
    result.penalty = lateness.penalty
    # the note (a file time used, a time refused) is always said: it is what the teacher checks
    result.late_text = "; ".join(t for t in (note if when is None else lateness.text,
                                             note if when is not None else "") if t)
    return result
