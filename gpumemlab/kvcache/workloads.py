"""Seeded synthetic request streams shaped like the vLLM paper's ShareGPT and Alpaca traces.

Models the workloads of vLLM's §6.1 (Fig. 11). These are SYNTHETIC: lengths are lognormal,
clipped so that prompt + output fits the model's maximum (2048 for OPT), and the lognormal's
location is solved (by bisection on the seeded draws) so that the sample means equal the paper's
published means: ShareGPT 161.31 input / 337.99 output tokens, Alpaca 19.31 / 58.45. The spreads
(sigma) are our choice, picked to give ShareGPT the heavier tail the paper describes; the paper gives
no medians. Arrivals are Poisson (exponential gaps) in decode steps, or all at step 0.
"""
from __future__ import annotations

from dataclasses import dataclass

# name -> (mean prompt, mean output, sigma prompt, sigma output); means from the paper, sigmas ours
SHAPES = {
    "sharegpt": (161.31, 337.99, 1.0, 0.9),
    "alpaca": (19.31, 58.45, 0.5, 0.8),
}


@dataclass(frozen=True)
class Workload:
    """A request stream: per request, its prompt and output lengths (tokens) and arrival step."""

    name: str
    prompt_lens: "object"     # numpy int64 arrays, one entry per request
    output_lens: "object"
    arrival_steps: "object"
    max_seq_len: int
    seed: int

    def __len__(self) -> int:
        return len(self.prompt_lens)

    @property
    def mean_prompt(self) -> float:
        return float(self.prompt_lens.mean())

    @property
    def mean_output(self) -> float:
        return float(self.output_lens.mean())

    def head(self, n: int) -> "Workload":
        """The first ``n`` requests."""
        return Workload(self.name, self.prompt_lens[:n], self.output_lens[:n],
                        self.arrival_steps[:n], self.max_seq_len, self.seed)

    def describe(self) -> str:
        return (f"{self.name}: {len(self)} requests, mean prompt {self.mean_prompt:.2f} tokens, "
                f"mean output {self.mean_output:.2f}, max total {self.max_seq_len} (seed {self.seed})")


def _lengths_with_mean(z, sigma: float, target: float, cap):
    """``clip(round(exp(mu + sigma z)), 1, cap)`` with mu solved so that the mean is ``target``."""
    import numpy as np
    lo, hi = -10.0, 12.0
    for _ in range(60):                       # the clipped mean grows with mu: bisection
        mu = (lo + hi) / 2
        lens = np.clip(np.rint(np.exp(mu + sigma * z)), 1, cap)
        if lens.mean() < target:
            lo = mu
        else:
            hi = mu
    return np.clip(np.rint(np.exp(hi + sigma * z)), 1, cap).astype(np.int64)


def make_workload(kind: str, num_requests: int = 1000, *, seed: int = 0, request_rate=None,
                  max_seq_len: int = 2048) -> Workload:
    """A seeded synthetic workload.

    Args:
        kind: "sharegpt" or "alpaca".
        num_requests: how many requests.
        seed: the random seed; the same seed gives the same requests.
        request_rate: mean arrivals per decode step (Poisson); ``None`` puts all at step 0, the
            saturated case in which memory alone limits the batch.
        max_seq_len: the model's maximum prompt + output length.
    """
    import numpy as np
    key = str(kind).lower().replace("-like", "")
    if key not in SHAPES:
        raise ValueError(f"unknown workload {kind!r}: use one of {sorted(SHAPES)}")
    for value, name in ((num_requests, "num_requests"), (max_seq_len, "max_seq_len")):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be an int, not {type(value).__name__}")
        if value < 1:
            raise ValueError(f"{name} must be positive, got {value}")
    if max_seq_len < 2:
        raise ValueError("max_seq_len must leave room for a prompt and an output token")
    mean_in, mean_out, sigma_in, sigma_out = SHAPES[key]
    rng = np.random.default_rng(seed)
    z_in, z_out = rng.standard_normal(num_requests), rng.standard_normal(num_requests)
    prompts = _lengths_with_mean(z_in, sigma_in, mean_in, max_seq_len - 1)
    outputs = _lengths_with_mean(z_out, sigma_out, mean_out, max_seq_len - prompts)
    if request_rate is None:
        arrivals = np.zeros(num_requests, dtype=np.int64)
    else:
        if not isinstance(request_rate, (int, float)) or isinstance(request_rate, bool) or request_rate <= 0:
            raise ValueError(f"request_rate must be a positive number of requests per step, got {request_rate!r}")
        arrivals = np.floor(np.cumsum(rng.exponential(1.0 / request_rate, num_requests))).astype(np.int64)
    return Workload(f"{key}-like", prompts, outputs, arrivals, max_seq_len, seed)


def sharegpt_like(num_requests: int = 1000, *, seed: int = 0, request_rate=None) -> Workload:
    """ShareGPT-shaped requests (means 161.31 in, 337.99 out)."""
    return make_workload("sharegpt", num_requests, seed=seed, request_rate=request_rate)


def alpaca_like(num_requests: int = 1000, *, seed: int = 0, request_rate=None) -> Workload:
    """Alpaca-shaped requests (means 19.31 in, 58.45 out)."""
    return make_workload("alpaca", num_requests, seed=seed, request_rate=request_rate)
