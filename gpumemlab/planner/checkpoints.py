"""``torch.save`` and ``torch.load`` while ``gpumemlab plan`` runs a script on fake tensors.

A fake tensor has no values to write, and pickling one fails. A checkpoint a script saves is
therefore kept in this process (a deep copy, as the file would be a copy), and the file gets one
line saying so, so that a script that checks the file exists, or reloads its best model at the end
(``torch.load`` of the same path), goes on: the load returns a fresh deep copy, new fake storages,
as loading onto the GPU makes new tensors there. An object without fake tensors is saved for real.
A ``map_location`` is not applied to a kept checkpoint (its tensors stay where they were saved).
"""
from __future__ import annotations

import contextlib
import copy
import io
import os

__all__ = ["checkpoints", "NOTE"]

NOTE = (b"gpumemlab plan: a checkpoint of fake tensors (they hold no values); torch.load of this "
        b"path in the same planning run returns a copy\n")


def _key(f):
    name = f if isinstance(f, (str, os.PathLike)) else getattr(f, "name", None)
    return os.path.realpath(os.fspath(name)) if isinstance(name, (str, os.PathLike)) else None


@contextlib.contextmanager
def checkpoints():
    """Patch ``torch.save``/``torch.load`` for the duration; yields the dict of kept checkpoints."""
    import torch
    real_save, real_load = torch.save, torch.load
    kept = {}

    def save(obj, f, *args, **kwargs):
        buf = io.BytesIO()
        try:
            real_save(obj, buf, *args, **kwargs)
        except Exception:            # fake tensors cannot be pickled: keep a copy instead
            key = _key(f)
            if key is None:
                raise
            kept[key] = copy.deepcopy(obj)
            data = NOTE
        else:
            data = buf.getvalue()
        if hasattr(f, "write"):
            f.write(data)
        else:
            with open(f, "wb") as out:
                out.write(data)

    def load(f, *args, **kwargs):
        key = _key(f)
        if key in kept:
            return copy.deepcopy(kept[key])
        return real_load(f, *args, **kwargs)

    torch.save, torch.load = save, load
    try:
        yield kept
    finally:
        torch.save, torch.load = real_save, real_load
