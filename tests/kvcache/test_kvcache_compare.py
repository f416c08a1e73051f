"""Sharing savings (Fig. 15), block-size sweep and the one-call comparison with its figure."""
import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

from gpumemlab.kvcache import (alpaca_like, block_size_sweep, compare, sharegpt_like,  # noqa: E402
                               sharing_savings)
from gpumemlab.kvcache.sharing import beam_search_blocks, parallel_sampling_blocks  # noqa: E402


def test_parallel_sampling_known_answer():
    """Prompt 20, output 4, blocks of 16, 2 samples: alone each sample holds 2 blocks at every
    step (21..24 tokens) -> 16 block-steps. Shared: the full prompt block once, and each sample's
    copy of the partial block -> 3 blocks a step -> 12. Saving 25%."""
    assert parallel_sampling_blocks(20, 4, 2, 16) == (16, 12)
    assert parallel_sampling_blocks(20, 4, 1, 16) == (8, 8)


def test_beam_search_shares_and_width_one_shares_nothing():
    import numpy as np
    u, s = beam_search_blocks(40, 30, 1, 16, np.random.default_rng(0))
    assert u == s
    u, s = beam_search_blocks(40, 30, 4, 16, np.random.default_rng(0))
    assert s < u


def test_sharing_savings_grow_with_width_and_match_the_paper_roughly():
    res = sharing_savings(alpaca_like(300, seed=0), widths=(2, 4, 6), num_requests=20)
    ps, beam = res.savings["parallel sampling"], res.savings["beam search"]
    assert ps[2] < ps[4] < ps[6] and beam[2] < beam[4] < beam[6]
    assert all(beam[k] > ps[k] for k in (2, 4, 6))
    # paper, Alpaca: 6.1-9.8% (sampling), 37.6-55.2% (beam); ours within a factor of 2
    assert 0.03 < ps[2] and ps[6] < 0.2 and 0.25 < beam[2] and beam[6] < 0.8
    assert "beam search" in res.table()
    with pytest.raises(ValueError, match="widths"):
        sharing_savings(alpaca_like(10), widths=(0,))


def test_block_size_sweep_internal_waste_grows_with_block_size():
    sweep = block_size_sweep(sharegpt_like(300, seed=0), (4, 16, 64, 256))
    tokens = [r.token_states for r in sweep.values()]
    batch = [r.mean_batch_size for r in sweep.values()]
    assert tokens == sorted(tokens, reverse=True) and batch == sorted(batch, reverse=True)
    partial = [r.shares["reserved"] + r.shares["internal_fragmentation"] for r in sweep.values()]
    assert partial == sorted(partial)
    assert sweep[256].token_states < 0.85 < 0.95 < sweep[4].token_states


def test_compare_table_and_figure():
    c = compare(seed=1, num_requests=150, block_sizes=(8, 32), sharing_requests=3, widths=(2,))
    again = compare(seed=1, num_requests=150, block_sizes=(8, 32), sharing_requests=3, widths=(2,))
    assert c.table() == again.table()
    text = c.table()
    for needle in ("Orca (Max)", "vLLM (paged)", "20.4", "parallel sampling", "block    8"):
        assert needle in text
    assert c._repr_html_().startswith("<pre>")
    assert c.results[("sharegpt", "paged")].token_states > c.results[("sharegpt", "orca-max")].token_states
    fig = c.figure()
    assert len(fig.axes) == 4
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()][-1] == "vLLM (paged)"
    with pytest.raises(TypeError, match="seed"):
        compare(seed="zero")
