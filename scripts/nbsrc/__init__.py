"""Cell sources of the curriculum notebooks, one module per notebook (see build_notebooks.py)."""
