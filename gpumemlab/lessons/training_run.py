"""Lesson 09's recorded run: a real torch training loop, captured on the CPU, replayed on a
simulated card until it runs out of memory (``python -m gpumemlab.lessons.training_run``
writes ``gpumemlab/lessons/data/training_run.pickle``; see the README there).

The loop is what a small language-model job looks like: a decoder-only transformer (token and
position embeddings, pre-norm attention and MLP blocks, an output head), AdamW, gradient
clipping, batches padded to the longest document they hold (so every step has its own sequence
length), and an evaluation pass under ``torch.no_grad()`` every few steps. ``gml.capture``
records every tensor storage with the Python frames that asked for it; the recorded sequence of
allocations and frees is then run on a ``SimulatedGPU`` with history on (the caching-allocator
model places every block, as ``torch.cuda.memory._record_memory_history`` would have recorded on
a card), and the snapshot is taken when an allocation fails. The card is the largest size, in
steps of ``CARD_STEP``, on which the run fails; the lesson finds out why.

Seeded (torch, the document lengths): the same torch version on the same CPU makes the same
recording. Importing this module imports torch; ``diagnose_your_run.py`` only loads the file.
"""
from __future__ import annotations

import random
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

VOCAB, D_MODEL, HEADS, LAYERS, MAX_LEN = 2048, 192, 4, 2, 512
BATCH, EVAL_BATCH, EVAL_EVERY, STEPS = 12, 24, 3, 6
CARD_STEP = 16 * 1024**2
OUT = Path(__file__).resolve().parent / "data" / "training_run.pickle"


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D_MODEL), nn.LayerNorm(D_MODEL)
        self.attn = nn.MultiheadAttention(D_MODEL, HEADS, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(D_MODEL, 4 * D_MODEL), nn.GELU(),
                                 nn.Linear(4 * D_MODEL, D_MODEL))

    def forward(self, x, pad):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, key_padding_mask=pad, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class LanguageModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D_MODEL)
        self.pos = nn.Embedding(MAX_LEN, D_MODEL)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm = nn.LayerNorm(D_MODEL)
        self.head = nn.Linear(D_MODEL, VOCAB, bias=False)

    def forward(self, tokens, pad):
        positions = torch.arange(tokens.shape[1])
        x = self.embed(tokens) + self.pos(positions)
        for block in self.blocks:
            x = block(x, pad)
        return self.head(self.norm(x))


def documents(rng: random.Random):
    """Document lengths of a mixed corpus: mostly short, a long tail up to MAX_LEN."""
    while True:
        yield min(MAX_LEN, int(rng.lognormvariate(4.6, 0.7)) + 8)


def make_batch(lengths, generator):
    """Random tokens for documents of these lengths, padded to the longest (0 = padding)."""
    longest = max(lengths)
    tokens = torch.randint(1, VOCAB, (len(lengths), longest + 1), generator=generator)
    pad = torch.arange(longest + 1)[None, :] >= torch.tensor(lengths)[:, None] + 1
    tokens = tokens.masked_fill(pad, 0)
    return tokens, pad


def lm_loss(model, tokens, pad):
    logits = model(tokens[:, :-1], pad[:, :-1])
    return F.cross_entropy(logits.reshape(-1, VOCAB), tokens[:, 1:].reshape(-1), ignore_index=0)


def train_step(model, optimizer, tokens, pad):
    loss = lm_loss(model, tokens, pad)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss.detach()


@torch.no_grad()
def evaluate(model, batches):
    total = torch.zeros(())
    for tokens, pad in batches:
        total += lm_loss(model, tokens, pad)
    return total / len(batches)


def record(seed: int = 0):
    """Run the loop under ``gml.capture``; return the capture."""
    from gpumemlab.recordings.capture import capture

    torch.manual_seed(seed)
    rng, gen = random.Random(seed), torch.Generator().manual_seed(seed)
    model = LanguageModel()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    docs = documents(rng)
    held_out = [make_batch([next(docs) for _ in range(EVAL_BATCH)], gen) for _ in range(2)]
    with capture(model, optimizer) as rec:
        for step in range(STEPS):
            rec.set_memory_metadata(f"step {step}")
            tokens, pad = make_batch([next(docs) for _ in range(BATCH)], gen)
            train_step(model, optimizer, tokens, pad)
            del tokens, pad
            if (step + 1) % EVAL_EVERY == 0:
                rec.set_memory_metadata(f"eval after step {step}")
                evaluate(model, held_out)
        rec.set_memory_metadata("")
    return rec


# --------------------------------------------------------------------------- the card
def _frame_path(filename: str, root: Path) -> str:
    """A frame's file as a path that names no machine: from the package or repo it lives in."""
    path = Path(filename)
    for marker in ("site-packages", "dist-packages"):
        if marker in path.parts:
            return "/".join(path.parts[path.parts.index(marker) + 1:])
    try:
        return path.resolve().relative_to(root).as_posix()
    except ValueError:
        pass
    lib = [i for i, part in enumerate(path.parts) if part.startswith("python3")]
    return "/".join(path.parts[lib[-1] + 1:]) if lib else path.name


def _portable(trace: list) -> list:
    """The trace with frames named portably and cut at ``record`` (what called it, a shell or a
    test runner, is not part of the run), each distinct frame one shared dict (small file)."""
    root, shared, out = Path(__file__).resolve().parents[2], {}, []
    for entry in trace:
        frames = []
        for f in entry.get("frames") or []:
            key = (_frame_path(f["filename"], root), f["line"], f["name"])
            frames.append(shared.setdefault(key, dict(zip(("filename", "line", "name"), key))))
            if key[2] == "record" and key[0] == "gpumemlab/lessons/training_run.py":
                break
        out.append({**entry, "frames": frames})
    return out


def run_on_card(trace: list, total_memory: int, alloc_conf: str = "") -> tuple:
    """Run the captured allocations and frees on a simulated card with history on, as far as
    the first allocation that fails. -> (the SimulatedGPU, the failing entry's index or None)."""
    from gpumemlab.allocator import OutOfMemoryError
    from gpumemlab.devices.simulated import SimulatedGPU

    gpu = SimulatedGPU(total_memory, alloc_conf=alloc_conf, record_frames=False,
                       max_entries=10 * len(trace) + 1000)
    alloc, blocks, free_frames = gpu.allocator, {}, {}
    for i, e in enumerate(trace):
        alloc.set_memory_metadata(e.get("user_metadata", ""))
        if e["action"] == "alloc":
            try:
                blocks[e["addr"]] = alloc.malloc(e["size"], 0, e["frames"])
            except OutOfMemoryError:
                return gpu, i
        elif e["action"] == "free_requested":
            free_frames[e["addr"]] = e["frames"]
        elif e["action"] == "free_completed":
            alloc.free(blocks.pop(e["addr"]), free_frames.pop(e["addr"], []))
    return gpu, None


def choose_card(trace: list) -> int:
    """The largest card, in steps of CARD_STEP, on which the run fails with the defaults."""
    card = run_on_card(trace, 1 << 40)[0].max_memory_reserved() // CARD_STEP * CARD_STEP
    while run_on_card(trace, card)[1] is None:
        card -= CARD_STEP
    return card


def snapshot_bytes(snapshot: dict) -> bytes:
    """The snapshot as ``_dump_snapshot`` pickles it, each distinct frame stored once (the
    simulator makes a new frame dict per entry; shared, the pickle's memo keeps the file small)."""
    import pickle

    from gpumemlab.recordings.files import normalize_snapshot

    snapshot, _notes = normalize_snapshot(snapshot, source="training_run")
    shared = {}

    def share(frames):
        return [shared.setdefault((f["filename"], f["line"], f["name"]), f) for f in frames]

    for seg in snapshot["segments"]:
        for block in seg["blocks"]:
            block["frames"] = share(block.get("frames", []))
    for entries in snapshot["device_traces"]:
        for entry in entries:
            entry["frames"] = share(entry.get("frames", []))
    return pickle.dumps(snapshot, protocol=pickle.DEFAULT_PROTOCOL)


def main(out: Path = OUT) -> Path:
    from gpumemlab.units import format_size

    trace = _portable(record().trace)
    card = choose_card(trace)
    gpu, failed = run_on_card(trace, card)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(snapshot_bytes(gpu.snapshot()))
    print(f"{out.name}: {len(trace)} captured entries, card {format_size(card)}, out of memory at "
          f"captured entry {failed} ({trace[failed]['user_metadata']}), {out.stat().st_size} bytes, "
          f"torch {torch.__version__}")
    return out


if __name__ == "__main__":
    main()
