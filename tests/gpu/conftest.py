"""GPU tests: skipped, with the reason, where torch.cuda is not available."""
import pytest


def pytest_collection_modifyitems(config, items):
    try:
        import torch
        ok = torch.cuda.is_available()
        why = "no CUDA device (torch.cuda.is_available() is False)"
    except Exception as exc:       # torch missing or broken
        ok, why = False, f"torch not importable ({exc})"
    for item in items:
        if "tests/gpu/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.gpu)
            if not ok:
                item.add_marker(pytest.mark.skip(reason=why))
