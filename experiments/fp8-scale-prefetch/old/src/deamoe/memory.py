"""Sizes that the settings multiply into memory, checked against the machine before allocating.

A value valid alone (trials, tokens, hidden size, vocabulary) can multiply with others into
terabytes; without this check the allocation fails deep inside torch or numpy, or the machine
swaps for an hour.  Each estimate is a lower bound (what must be held at once), so a run that
fits is never refused.
"""

from __future__ import annotations

import os

from deamoe.errors import ConfigError

GIB = 1024 ** 3


def machine_bytes(device: str = "cpu") -> int:
    """Memory of `device`: a CUDA GPU's total memory, else this machine's physical memory."""
    if str(device).startswith("cuda"):
        import torch

        return int(torch.cuda.get_device_properties(torch.device(device)).total_memory)
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def check_fits(need: float, what: str, keys: str, device: str = "cpu") -> None:
    """ConfigError naming `what` and the `keys` that size it when `need` bytes exceed the memory
    of `device`."""
    have = machine_bytes(device)
    if need > have:
        raise ConfigError(f"{what} needs at least {need / GIB:,.1f} GiB, more than the "
                          f"{have / GIB:,.1f} GiB of this machine's {device} ({keys}); make them smaller")
