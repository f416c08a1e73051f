"""Seeded request streams whose prompts share prefixes: a common system prompt, few-shot
templates, multi-turn chat, and a stream with nothing shared (the 0 % hit-rate case).

Token ids are random ints (a 32,000-token vocabulary), so two prompts share exactly the prefix
the generator gives them and nothing by chance. Lengths are lognormal with the given means. In a
chat, turn t's prompt is the whole conversation so far (earlier prompts and answers) plus a new
user message, and it may start only after turn t-1 has finished (``after``). SYNTHETIC: the
shapes are ours, picked to show the effects; they are not fitted to a trace.
"""
from __future__ import annotations

from dataclasses import dataclass

VOCAB = 32_000
KINDS = ("system-prompt", "few-shot", "multi-turn", "unique")


@dataclass(frozen=True)
class PrefixRequest:
    """One request: its prompt and output token ids, and the request it must wait for (or -1)."""

    prompt: tuple
    output: tuple
    after: int = -1

    @property
    def total(self) -> int:
        return len(self.prompt) + len(self.output)


@dataclass(frozen=True)
class PrefixWorkload:
    name: str
    requests: tuple
    seed: int

    def __len__(self) -> int:
        return len(self.requests)

    @property
    def prompt_tokens(self) -> int:
        return sum(len(r.prompt) for r in self.requests)

    def describe(self) -> str:
        n = len(self.requests)
        return (f"{self.name}: {n} requests, mean prompt {self.prompt_tokens / n:.1f} tokens, "
                f"mean output {sum(len(r.output) for r in self.requests) / n:.1f} (seed {self.seed})")


def _lengths(rng, n, mean, sigma=0.6, low=1, high=4096):
    import numpy as np
    mu = np.log(mean) - sigma ** 2 / 2          # lognormal with this mean
    return np.clip(np.rint(rng.lognormal(mu, sigma, n)), low, high).astype(int).tolist()


def _tokens(rng, n) -> tuple:
    return tuple(rng.integers(0, VOCAB, n).tolist())


def _check(n, name="num_requests"):
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"{name} must be a positive int, got {n!r}")


def prefix_workload(kind: str, num_requests: int = 1000, *, seed: int = 0, shared_len: int = 1000,
                    num_prefixes: int = 8, turns: int = 4, user_mean: int = 100,
                    output_mean: int = 200) -> PrefixWorkload:
    """A seeded stream of ``num_requests`` requests of ``kind`` (see ``KINDS``).

    Args:
        shared_len: tokens of the system prompt, or of each few-shot template.
        num_prefixes: how many few-shot templates requests pick from (uniformly).
        turns: turns per conversation (multi-turn); ``num_requests // turns`` conversations.
        user_mean, output_mean: mean lengths of a user message and of an answer.
    """
    import numpy as np
    _check(num_requests)
    for value, name in ((shared_len, "shared_len"), (num_prefixes, "num_prefixes"), (turns, "turns"),
                        (user_mean, "user_mean"), (output_mean, "output_mean")):
        _check(value, name)
    key = str(kind).lower()
    if key not in KINDS:
        raise ValueError(f"unknown prefix workload {kind!r}: use one of {list(KINDS)}")
    rng = np.random.default_rng(seed)
    users = _lengths(rng, num_requests, user_mean)
    outs = _lengths(rng, num_requests, output_mean)
    if key == "system-prompt":
        system = _tokens(rng, shared_len)
        reqs = [PrefixRequest(system + _tokens(rng, u), _tokens(rng, o)) for u, o in zip(users, outs)]
    elif key == "few-shot":
        templates = [_tokens(rng, shared_len) for _ in range(num_prefixes)]
        picks = rng.integers(0, num_prefixes, num_requests).tolist()
        reqs = [PrefixRequest(templates[p] + _tokens(rng, u), _tokens(rng, o))
                for p, u, o in zip(picks, users, outs)]
    elif key == "unique":
        reqs = [PrefixRequest(_tokens(rng, shared_len + u), _tokens(rng, o)) for u, o in zip(users, outs)]
    else:
        reqs = _chats(rng, num_requests, turns, users, outs)
    return PrefixWorkload(key, tuple(reqs), seed)


def _chats(rng, n, turns, users, outs) -> list:
    """Conversations interleaved at random: each step continues a random unfinished one."""
    conversations = max(1, n // turns)
    left = [turns] * conversations
    history = [()] * conversations
    last = [-1] * conversations
    reqs = []
    active = list(range(conversations))
    while len(reqs) < n and active:
        c = active[int(rng.integers(0, len(active)))]
        i = len(reqs)
        prompt = history[c] + _tokens(rng, users[i])
        output = _tokens(rng, outs[i])
        reqs.append(PrefixRequest(prompt, output, last[c]))
        history[c], last[c] = prompt + output, i
        left[c] -= 1
        if not left[c]:
            active.remove(c)
    return reqs
