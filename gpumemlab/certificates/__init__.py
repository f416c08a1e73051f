"""Certificates: signed records of a learner's result (``record``), issued from a grades table
(``issue``), with Ed25519 keys (``keys``) and HTML/PNG pages (``render``). Importing this package
imports none of its modules.
"""
