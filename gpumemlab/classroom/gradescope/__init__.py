"""The grader as a Gradescope autograder: ``pack`` makes the zip a teacher uploads (``config``:
its settings file), ``run`` is what runs in Gradescope's container for each submission, reading
the submission's metadata (``metadata``: times and users, untrusted), seeding the student's
variant from their identity (``identity``) and writing ``results.json`` (``results``).
Importing this package imports none of its modules.
"""
