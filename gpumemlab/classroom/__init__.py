"""Classroom: the student-version maker (``assign``, ``build``, ``cells``), the grader that runs
each submission in its own kernel (``grade``, ``runner``, ``sandbox``), its reports
(``reports``) and the same grader as a Gradescope autograder (``gradescope_pack`` makes the zip,
``gradescope_run`` runs in the container). Importing this package imports none of its modules.
"""
