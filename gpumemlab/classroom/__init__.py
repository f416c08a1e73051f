"""Classroom: the student-version maker (``assign``, ``build``, ``cells``), the grader that runs
each submission in its own kernel (``grade``, ``runner``, ``sandbox``) and its reports
(``reports``). Importing this package imports none of its modules.
"""
