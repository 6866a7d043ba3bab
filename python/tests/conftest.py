import pytest

import tileattn

try:
    import torch
except ImportError:  # the numpy tests run without torch
    torch = None


def devices():
    """CPU, and CUDA where this build has the backend and the machine a GPU."""
    found = ["cpu"]
    if torch is not None and torch.cuda.is_available() and tileattn.build_info()["cuda"]:
        found.append("cuda")
    return found


@pytest.fixture(params=devices())
def device(request):
    return request.param


@pytest.fixture(autouse=True)
def _seed():
    if torch is not None:
        torch.manual_seed(0)
