"""Published reference values from the vLLM paper (Kwon et al., SOSP'23, arXiv:2309.06180).

These are citations, not results of the kit: they are drawn next to the simulator's numbers so a
learner can see how close the reproduction gets. Sources: Fig. 2 (waste breakdown, OPT-13B,
ShareGPT), Fig. 13 (average batched requests, OPT-13B), Fig. 15 (memory saved by sharing),
§6.1 (workload means). See docs/KVCACHE.md for the comparison.
"""
from __future__ import annotations

# Fig. 2: percentage of KV memory by category
FIG2_BREAKDOWN = {
    "orca-max": {"token_states": 20.4, "reserved": 13.3, "internal_fragmentation": 57.3,
                 "external_and_others": 8.9},
    "orca-pow2": {"token_states": 26.8, "reserved": 17.9, "internal_fragmentation": 13.6,
                  "external_and_others": 41.6},
    "orca-oracle": {"token_states": 38.2, "reserved": 25.2, "internal_fragmentation": 0.0,
                    "external_and_others": 36.6},
    "paged": {"token_states": 96.3},
}

# Fig. 13: average number of batched requests (ShareGPT at 2 req/s, Alpaca at 30 req/s)
FIG13_BATCH = {
    "sharegpt": {"orca-max": 7.00, "orca-pow2": 9.81, "orca-oracle": 13.62, "paged": 30.42},
    "alpaca": {"orca-max": 7.00, "orca-pow2": 43.24, "orca-oracle": 72.75, "paged": 132.44},
}

# Fig. 15: memory saving (%) by sharing, for 2 / 4 / 6 samples or beams
FIG15_SAVING = {
    "alpaca": {"parallel sampling": {2: 6.09, 4: 8.53, 6: 9.79},
               "beam search": {2: 37.56, 4: 53.13, 6: 55.16}},
    # The paper gives only the range for ShareGPT; the ends are taken as widths 2 and 6.
    "sharegpt": {"parallel sampling": {2: 16.2, 6: 30.5}, "beam search": {2: 44.3, 6: 66.3}},
}

# §7.2, Fig. 18b: block sizes with the best latency
BEST_BLOCK_SIZES = {"sharegpt": (16, 128), "alpaca": (16, 32)}
