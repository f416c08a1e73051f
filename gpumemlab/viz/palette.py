"""Colours and names of block states, shared by every view (Okabe-Ito, colour-blind safe).

Okabe & Ito's eight colours stay distinguishable under the common colour-vision deficiencies.
Free memory is a neutral light grey so that it reads as "empty", and the two parts of an
allocated block are two blues so that rounding waste reads as "still allocated".
"""
from __future__ import annotations

OKABE_ITO = {
    "black": "#000000", "orange": "#E69F00", "sky_blue": "#56B4E9", "bluish_green": "#009E73",
    "yellow": "#F0E442", "blue": "#0072B2", "vermillion": "#D55E00", "reddish_purple": "#CC79A7",
}

# category -> (colour, legend label); the drawing order is this order
BLOCK_STYLE = {
    "requested": (OKABE_ITO["blue"], "allocated: bytes requested"),
    "rounding": (OKABE_ITO["sky_blue"], "allocated: lost to rounding"),
    "pending": (OKABE_ITO["reddish_purple"], "freed, not yet returned (pending)"),
    "free": ("#DDDDDD", "free, cached (inactive)"),
}
SEGMENT_EDGE = "#444444"
EXPANDABLE_EDGE = OKABE_ITO["orange"]
LARGEST_FREE_EDGE = OKABE_ITO["bluish_green"]
REQUEST_COLOUR = OKABE_ITO["vermillion"]

# what an allocation is for (``gml.capture``'s categories, those of torch.profiler's memory
# profiler) -> its colour, the same in every figure of every lesson
CATEGORY_COLOURS = {
    "parameter": OKABE_ITO["blue"], "gradient": OKABE_ITO["orange"],
    "activation": OKABE_ITO["bluish_green"], "optimizer_state": OKABE_ITO["reddish_purple"],
    "temporary": OKABE_ITO["yellow"], "input": OKABE_ITO["sky_blue"],
    "workspace": OKABE_ITO["vermillion"], "(no category)": "#BBBBBB",
}

# timeline series -> (colour, label, line style)
SERIES_STYLE = {
    "reserved_bytes": (OKABE_ITO["orange"], "reserved", "-"),
    "allocated_bytes": (OKABE_ITO["blue"], "allocated", "-"),
    "requested_bytes": (OKABE_ITO["bluish_green"], "requested", "--"),
}
# colours for comparing several replays on one axis
COMPARE_COLOURS = (OKABE_ITO["blue"], OKABE_ITO["vermillion"], OKABE_ITO["bluish_green"],
                   OKABE_ITO["orange"], OKABE_ITO["reddish_purple"], OKABE_ITO["sky_blue"],
                   OKABE_ITO["black"])


def unit_for(max_bytes: int):
    """(unit bytes, unit name) that keeps axis numbers readable for a range up to max_bytes."""
    for unit, name in ((1 << 40, "TiB"), (1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if max_bytes >= unit:
            return unit, name
    return 1, "bytes"

# every legend label that names a category -> its one colour, in every figure of every lesson:
# what an allocation is for, a block's state, a memory series (tests/notebooks/test_lesson_figures
# reads the lessons' legends against it)
CATEGORIES = {**CATEGORY_COLOURS,
              **{label: colour for colour, label in BLOCK_STYLE.values()},
              **{label: colour for colour, label, _ in SERIES_STYLE.values()}}
