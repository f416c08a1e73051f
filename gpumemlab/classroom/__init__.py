"""Classroom: the student-version maker (``assign``, ``build``, ``cells``), the grader that runs
each submission in its own kernel (``grade``, ``runner``, ``kernel_guard``: what it injects into
the kernel), isolated by the OS (``isolation``: bubblewrap, or an unprivileged uid of its own),
its answers judged outside (``verdicts``, in limited children: ``judge_pool``), its reports
(``reports``), item statistics (``stats``) and the same grader as a Gradescope autograder
(``gradescope``). Importing this package imports none of its modules.
"""
