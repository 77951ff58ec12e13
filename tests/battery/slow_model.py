"""Battery fixture for Ctrl-C: under torch.profiler, forward writes a marker file and sleeps.

The marker path comes from ADVISOR_BATTERY_MARKER; it is written when the model runs under
torch.profiler, so the test knows the interrupt lands in the middle of profiling.
"""
import os
import time
from pathlib import Path

import torch


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(16, 16)

    def forward(self, x):
        if torch._C._autograd._profiler_enabled():  # the timed steps before it stay fast
            marker = os.environ.get("ADVISOR_BATTERY_MARKER")
            if marker:
                Path(marker).write_text("profiling\n")
            time.sleep(0.05)
        return torch.softmax(self.fc(x), dim=-1)


def get_inputs():
    return [torch.randn(4, 16)]
