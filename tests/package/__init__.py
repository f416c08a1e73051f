"""Tests of the package as a whole: its layout, flat API, packaging, docs and top-level modules."""
