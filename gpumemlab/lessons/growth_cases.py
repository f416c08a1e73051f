"""Real torch loops, run on the CPU under ``gml.capture``, in which memory grows step after step,
one per cause that ``gml.growth`` names; each but ``fragmentation`` (whose fix is a setting) has
``fixed=True``, the same loop written well.

Every case marks its steps with ``rec.set_memory_metadata(f"step {i}")`` (what
``torch.cuda.memory._set_memory_metadata`` does on a GPU) and returns the ``Capture``:

* leaks: ``losses_summed`` (a validation loss summed as a tensor, with its graph),
  ``predictions_kept`` (outputs appended to a list), ``reference_cycle`` (a step record that
  points at itself: only ``gc.collect()`` frees it), ``jupyter_out`` (cells run by a real
  IPython shell: ``Out[n]`` and ``_`` keep each result), ``stored_traceback`` (caught errors
  kept: each traceback holds its frame's tensors);
* ``optimizer_state``: Adam's state, made by the first ``step()``;
* ``new_shapes``: batches of varying sequence length;
* ``fragmentation``: the same step again and again, whose cache no longer fits at step 1.

Sizes are small (a few MiB) so each case runs in well under a second.
"""
from __future__ import annotations

import contextlib
import gc
import io

from gpumemlab.recordings.capture import capture

__all__ = ["mlp", "losses_summed", "predictions_kept", "reference_cycle", "jupyter_out",
           "stored_traceback", "optimizer_state", "new_shapes", "fragmentation", "CASES"]


def mlp(d_in: int = 256, hidden=(1024,), d_out: int = 256, seed: int = 0):
    """A perceptron: Linear and ReLU for each hidden width, then Linear to ``d_out``; seeded."""
    import torch
    from torch import nn
    torch.manual_seed(seed)
    layers, width = [], d_in
    for h in hidden:
        layers += [nn.Linear(width, h), nn.ReLU()]
        width = h
    return nn.Sequential(*layers, nn.Linear(width, d_out))


def _batch(i: int, batch: int, d_in: int, d_out: int):
    import torch
    g = torch.Generator().manual_seed(i)
    return torch.randn(batch, d_in, generator=g), torch.randn(batch, d_out, generator=g)


def _train(model, opt, x, y):
    import torch.nn.functional as F
    out = model(x)
    loss = F.mse_loss(out, y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return out, loss


def losses_summed(steps: int = 4, batch: int = 512, fixed: bool = False):
    """Validation without ``torch.no_grad()``: ``total = total + loss`` keeps every step's graph
    and the activations it saved for a backward that never comes. Fixed: ``loss.item()``."""
    import torch.nn.functional as F
    model = mlp()
    with capture(model) as rec:
        total = 0.0
        for i in range(steps):
            rec.set_memory_metadata(f"step {i}")
            x, y = _batch(i, batch, 256, 256)
            loss = F.mse_loss(model(x), y)
            total = total + (loss.item() if fixed else loss)
        rec.set_memory_metadata("")
        del total, loss, x, y
    return rec


def predictions_kept(steps: int = 4, batch: int = 512, fixed: bool = False, keep=None,
                     sink=None):
    """Training that appends each step's output to a list. Fixed: keep ``argmax(1).tolist()``
    (on a GPU, ``.cpu()`` would also do; on the CPU it shares the storage). ``keep(out)``, when
    given, is what is appended instead; ``sink`` (a list) receives the list after the capture."""
    import torch
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    with capture(model, opt) as rec:
        preds = []
        for i in range(steps):
            rec.set_memory_metadata(f"step {i}")
            x, y = _batch(i, batch, 256, 256)
            out, loss = _train(model, opt, x, y)
            if keep is not None:                     # the lesson's exercise
                preds.append(keep(out))
            elif fixed:
                preds.append(out.argmax(1).tolist())
            else:
                preds.append(out)                    # the output's storage, every step
        rec.set_memory_metadata("")
        del out, loss, x, y
    if sink is not None:
        sink.extend(preds)
    return rec


class StepRecord:
    """A record of one step that points back at itself (as a parent/child pair or a bound
    method stored on its own object does): a reference cycle that only the collector frees."""

    def __init__(self, out, link: bool = True):
        self.out = out
        self.me = self if link else None


def reference_cycle(steps: int = 4, batch: int = 512, fixed: bool = False):
    """Each step makes a ``StepRecord`` holding its output and drops it. With the collector off
    (as between its runs) the cycles stay until ``gc.collect()``, after the last step. Fixed: no
    self-link, so the record dies as soon as it is dropped."""
    import torch
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    was_enabled = gc.isenabled()
    gc.disable()   # the collector runs when it likes; off, the growth is the same every time
    try:
        with capture(model, opt) as rec:
            for i in range(steps):
                rec.set_memory_metadata(f"step {i}")
                x, y = _batch(i, batch, 256, 256)
                out, loss = _train(model, opt, x, y)
                StepRecord(out.detach(), link=not fixed)
            rec.set_memory_metadata("")
            del out, loss, x, y
            gc.collect()                                  # frees every StepRecord at once
    finally:
        if was_enabled:
            gc.enable()
    return rec


def reference_cycle_gc_on(steps: int = 24, batch: int = 512):
    """The reference cycle with automatic collection on, as Python ships it: the records pile up
    until the collector's next pass (its generation-0 threshold, ``gc.get_threshold()[0]``, of
    new container objects) frees them all. Returns (capture, passes): each pass of the collector
    during the loop as {"generation", "collected" (objects), "start", "stop" (trace indices)},
    from ``gc.callbacks``; a pass that freed tensors also marks the trace ("gc pass N")."""
    import torch
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    passes = []

    def on_gc(phase, info):
        if phase == "start":
            passes.append({"generation": info["generation"], "start": len(rec.trace)})
            rec.set_memory_metadata(f"gc pass {len(passes)}")
        elif passes:
            passes[-1].update(collected=info["collected"], stop=len(rec.trace))
            rec.set_memory_metadata("")

    was_enabled = gc.isenabled()
    gc.enable()
    gc.collect()                      # start from a clean slate: the count begins at zero
    with capture(model, opt) as rec:
        gc.callbacks.append(on_gc)
        try:
            for i in range(steps):
                x, y = _batch(i, batch, 256, 256)
                out, loss = _train(model, opt, x, y)
                StepRecord(out.detach())
        finally:
            gc.callbacks.remove(on_gc)
            if not was_enabled:
                gc.disable()
        del out, loss, x, y
        gc.collect()                  # the records left since the last pass (not in ``passes``)
    return rec, [p for p in passes if "stop" in p]


def jupyter_out(steps: int = 4, batch: int = 512, fixed: bool = False):
    """Cells ending in an expression, run by a real IPython shell: the result is shown, and
    kept in ``Out[n]`` (and ``_``, ``__``, ``___``). Fixed: a trailing ``;`` shows nothing and
    keeps nothing."""
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config
    cfg = Config()
    cfg.HistoryManager.enabled = False             # no history database on disk
    shell = InteractiveShell(config=cfg)
    model = mlp()
    x, _y = _batch(0, batch, 256, 256)
    shell.user_ns.update(model=model, x=x)
    cell = "model(x).relu()" + (";" if fixed else "")
    with capture(model) as rec, contextlib.redirect_stdout(io.StringIO()):
        for i in range(steps):
            rec.set_memory_metadata(f"cell {i}")
            shell.run_cell(cell, store_history=True)
        rec.set_memory_metadata("")
    shell.reset(new_session=False)
    return rec


def _checked_forward(model, x):
    h = model[0](x)
    a = model[1](h)
    out = model[2](a)
    if not bool(out.isfinite().all()):
        raise FloatingPointError("the output is not finite")
    return out


def stored_traceback(steps: int = 4, batch: int = 512, fixed: bool = False):
    """Every batch holds a NaN; the loop catches the error and keeps it to report later. An
    exception's ``__traceback__`` holds the frame that raised, and so its tensors. Fixed: keep
    the message (``str(err)``), not the exception."""
    model = mlp()
    with capture() as rec:      # no model: its submodules are called one by one here
        errors = []
        for i in range(steps):
            rec.set_memory_metadata(f"step {i}")
            x = _batch(i, batch, 256, 256)[0]
            x[0, 0] = float("nan")
            try:
                _checked_forward(model, x)
            except FloatingPointError as err:
                errors.append(str(err) if fixed else err)
        rec.set_memory_metadata("")
        del errors, x
    return rec


def optimizer_state(steps: int = 4, batch: int = 512, fixed: bool = False):
    """Adam's first ``step()`` makes ``exp_avg`` and ``exp_avg_sq`` for every parameter (and a
    step count); later steps update them in place. ``fixed=True`` uses plain SGD (no state)."""
    import torch
    model = mlp()
    opt = (torch.optim.SGD(model.parameters(), lr=1e-3) if fixed
           else torch.optim.Adam(model.parameters(), lr=1e-3))
    with capture(model, opt) as rec:
        for i in range(steps):
            rec.set_memory_metadata(f"step {i}")
            x, y = _batch(i, batch, 256, 256)
            out, loss = _train(model, opt, x, y)
        rec.set_memory_metadata("")
        del out, loss, x, y
    return rec


def _tokens(i, batch, length, vocab):
    import torch
    g = torch.Generator().manual_seed(i)
    return torch.randint(0, vocab, (batch, length + 1), generator=g)


NEW_SHAPE_LENGTHS = (64, 32, 96, 64, 128, 96, 32, 128)


def new_shapes(lengths=NEW_SHAPE_LENGTHS, batch: int = 8, fixed: bool = False,
               d_model: int = 64, n_layers: int = 1, vocab: int = 512):
    """A small transformer trained on batches of the given sequence lengths: each new length
    asks for new tensor sizes. Fixed: every batch padded to the longest length."""
    import torch
    import torch.nn.functional as F
    from gpumemlab.lessons.capture_demo import tiny_transformer
    model, _adam = tiny_transformer(vocab=vocab, seq_len=max(lengths), d_model=d_model,
                                    n_layers=n_layers)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    vocab = model.embed.num_embeddings
    with capture(model, opt) as rec:
        for i, length in enumerate(lengths):
            rec.set_memory_metadata(f"step {i} (length {length})")
            tokens = _tokens(i, batch, max(lengths) if fixed else length, vocab)
            logits = model(tokens[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, vocab), tokens[:, 1:].reshape(-1))
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        rec.set_memory_metadata("")
        del tokens, logits, loss
    return rec


def _step(model, opt, i, b):
    x, y = _batch(i, b, 256, 256)
    _train(model, opt, x, y)


def fragmentation(steps: int = 3, batch: int = 2048, hidden=(768, 1536)):
    """A healthy loop: the same batch size every step, the step a function (its tensors die
    when it returns). Yet step 1 reserves more than step 0: in an empty cache every request
    got a fitting new segment; in step 1 best fit hands the 2 and 6 MiB requests the smallest
    free blocks that hold them, the 12 MiB segments, and a later 12 MiB request no longer
    fits. The fix is a setting, not code: ``alloc_conf="expandable_segments:True"``."""
    import torch
    model = mlp(hidden=hidden)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    with capture(model, opt) as rec:
        for i in range(steps):
            rec.set_memory_metadata(f"step {i}")
            _step(model, opt, i, batch)
        rec.set_memory_metadata("")
    return rec


CASES = {"losses summed": losses_summed, "predictions kept": predictions_kept,
         "reference cycle": reference_cycle, "Jupyter Out[]": jupyter_out,
         "stored traceback": stored_traceback, "optimizer state": optimizer_state,
         "new shapes": new_shapes, "fragmentation": fragmentation}
