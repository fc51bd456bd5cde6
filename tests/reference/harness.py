"""What the PyTorch cross-check scripts share: the error measure they report."""

import numpy as np


def rel_err(ours, ref):
    """max |k3lab - torch| / max |torch| over a tensor."""
    ref = ref.detach().numpy()
    return float(np.abs(ours - ref).max() / max(np.abs(ref).max(), 1e-30))
