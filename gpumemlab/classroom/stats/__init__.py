"""Item statistics of a class: the grader writes ``items.csv`` (``items``); ``gpumemlab stats``
reads it and ``grades.csv`` back (``reading``), computes each item's difficulty and
discrimination (``measures``) and shows them as a table, CSV, HTML page or figure (``view``,
``plot``). Importing this package imports none of its modules.
"""
