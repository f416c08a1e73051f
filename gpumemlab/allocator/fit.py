"""Which cached block a request may take, and whether the block is cut: the size rules of c10's
``get_free_block`` (the oversize rules) and ``should_split``, as pure functions.

They are the one copy of these rules: the allocator calls them, and so do replay (telling a user
``empty_cache()`` from a release inside ``malloc``) and the views (``viz/size_rules.py``: would a
request fit this cached block?). ``settings`` is anything with the config's attribute names
(``max_split_size``, ``max_non_split_rounding_size``, ``expandable_segments``), such as an
:class:`~gpumemlab.allocator.config.AllocatorConfig`.
"""
from __future__ import annotations

from .constants import K_MIN_BLOCK_SIZE, K_SMALL_SIZE


def oversize_allows(block_size: int, size: int, settings) -> bool:
    """``get_free_block``'s oversize tests for a cached block of ``block_size`` and a rounded
    request of ``size`` (the block is already known to be at least ``size``)."""
    max_split_size = settings.max_split_size
    if size < max_split_size:
        # Do not return an oversized block for a large request
        return block_size < max_split_size
    # Allow oversized block size to be rounded up but within a limit
    return block_size < size + settings.max_non_split_rounding_size


def should_split(is_small: bool, block_size: int, size: int, settings,
                 expandable_active=None) -> bool:
    """c10 ``should_split``: whether a block of ``block_size`` handed to a rounded request of
    ``size`` is cut, leaving the rest cached. ``expandable_active`` is the request's
    ``is_expandable_segments_active`` (default: the setting; False for a request served by a
    ``use_on_oom`` pool). The ``no_split`` pool check is the allocator's."""
    remaining = block_size - size
    if expandable_active is None:
        expandable_active = settings.expandable_segments
    if is_small or expandable_active:
        return remaining >= K_MIN_BLOCK_SIZE
    return size < settings.max_split_size and remaining > K_SMALL_SIZE
