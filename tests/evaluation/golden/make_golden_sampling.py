"""Writes the golden sampling fixtures (``sampling_<case>.npz``) that
``tests/evaluation/test_sampling_golden.py`` compares ``RolloutWorker.sample()`` with.

They were written from the sampler before the issue-26 speed work (main b86c852);
rerun only when a change of the sampled batches is intended and reviewed:

    OMP_NUM_THREADS=1 .venv/bin/python tests/evaluation/golden/make_golden_sampling.py
"""

import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import torch  # noqa: E402
from golden_sampling_cases import CASES, run_case  # noqa: E402

if __name__ == "__main__":
    torch.set_num_threads(1)
    for name in sys.argv[1:] or CASES:
        arrays = run_case(name)
        arrays["torch_version"] = np.array(torch.__version__)
        np.savez_compressed(os.path.join(HERE, f"sampling_{name}.npz"), **arrays)
        print(name, len(arrays), "arrays")
