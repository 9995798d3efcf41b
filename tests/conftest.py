"""Shared pytest configuration: GPU tests are skipped where no CUDA device exists, and Triton
kernels run under Triton's interpreter on CPU tensors there.
"""
import os

import pytest

try:
    import torch

    HAS_GPU = torch.cuda.is_available()
except Exception:  # torch missing or broken: no GPU path either
    HAS_GPU = False

# NOTE: triton reads TRITON_INTERPRET when a kernel is decorated, i.e. when the kernel module is
# first imported; conftest runs before any test module imports one. Only without a GPU: on a
# GPU the same tests run the compiled kernels on CUDA tensors.
if not HAS_GPU:
    os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_collection_modifyitems(config, items):
    if HAS_GPU:
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)
