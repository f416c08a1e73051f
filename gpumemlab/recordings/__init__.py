"""Recordings: snapshot files (``files``: safe load and dump), CPU capture of real torch code
(``capture``), and replay of a recorded trace on the simulated GPU, faithfully or under other
settings (``replay`` and its helpers). Importing this package imports none of its modules.
"""
