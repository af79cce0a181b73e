"""What one launch of the grouped-GEMM primitive (deamoe.kernels.grouped_gemm) computes -- row
modes, epilogue, accumulation -- and on which tile (`GemmSpec`), with the shared memory its
kernel needs on that tile, which the microbenchmark's search skips knob sets by before
compiling them (`GemmSpec.shared_memory`, `shared_memory_limit`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from deamoe.kernels.tile_config import TileConfig

ROW_TOKEN, ROW_PAIR, ROW_TOKDEPT = 0, 1, 2
EPI_ACT, EPI_SWIGLU, EPI_BOTH = 0, 1, 2
ACTS = {"none": 0, "silu": 1, "gelu": 2}


@dataclass(frozen=True)
class GemmSpec:
    """One launch of the primitive: what it computes (row modes, epilogue, accumulation: fixed
    by the layer's structure) and on which tile (chosen by the microbenchmark's search, carried
    here from MoETiles / DeaMoETiles to the launch).  n_dept / per_group index ROW_TOKDEPT rows;
    a_up_off is where EPI_SWIGLU's up input starts in A's rows, c_up_off where EPI_BOTH's up
    half goes in C's."""

    a_mode: int
    c_mode: int
    epi: int = EPI_ACT
    act: str = "none"
    atomic: bool = False  # sum into C (with the routing weight where one is given) instead of storing
    n_dept: int = 1
    per_group: int = 1
    a_up_off: int = 0
    c_up_off: int = 0
    tile: TileConfig = TileConfig()

    def __post_init__(self):
        if self.act not in ACTS:
            raise ValueError(f"grouped_gemm: act={self.act!r} is not one of {', '.join(ACTS)}")

    def shared_memory(self, block_m: int, itemsize: int = 2, fp8=None,
                      a_absmax: bool = False) -> int:
        """A lower bound of the shared memory (bytes) Triton gives this GEMM's kernel at BLOCK_M
        rows, from the tile alone, before compiling: a tile set over the device's limit by this
        count cannot compile, so the search skips it without losing one that would.

        The MMA reads its operands through shared memory, and the software pipeline keeps
        `copies` = num_stages - 1 of every tile it loads (one without pipelining): A's BLOCK_M x
        BLOCK_K tile per A input (two for EPI_SWIGLU, whose up input is a second load) and the
        BLOCK_N x BLOCK_K weight tile per weight input (two when gated), TMA or not.  Hopper's
        asynchronous wgmma, taken where the MMA's M side (BLOCK_M, or BLOCK_N with swap) is >= 64,
        keeps one more.  bf16: all of `itemsize` bytes, one more copy of everything under wgmma.
        FP8 weights (`fp8`, an Fp8Format) are e4m3 (1 byte); A stays bf16 in shared memory.
        w8a8 quantises A in the main loop: one more copy of the weights under wgmma, and one of
        the quantised A (e4m3 under wgmma, bf16-wide without); with A quantised before the launch
        (the tile's preq) every tile is e4m3 and bf16's rule holds at 1 byte.  `a_absmax`: A is
        the output of a '-qs' GEMM (stored with its absmax, quantised in the main loop with it,
        whatever this tile's preq): its bf16 copies, the weights' as on the main loop's
        quantiser, the quantised A only where it is swapped wgmma's B (without a reduction it
        stays in registers otherwise), and the pipelined copies of its rows' absmax (4 bytes a
        row); unpipelined (one stage) one weight tile, a bound (Triton 3.9 on the CPU: every
        count within 1080 B above the estimate at 2-5 stages).  Weight-only: one more copy of A
        under wgmma, and, with the weights on wgmma's B side (not swapped), one weight tile
        widened to bf16.  Counted against Triton 3.6's own figure for sm_90 (`bench smem-check`
        on the H200, and the same compile on the CPU: tests/kernels/test_gemm_smem.py) at every
        GEMM x tile x BLOCK_M of the search: bf16 288 kernels, each precision of FP8 240, within
        1.1 KB below it (barriers, the epilogue's scratch), never above."""
        t = self.tile
        wgmma = (t.block_n if t.swap else block_m) >= 64 and t.num_warps % 4 == 0
        copies = 1 if t.num_stages == 1 else t.num_stages - 1
        a_rows = (2 if self.epi == EPI_SWIGLU else 1) * block_m
        w_rows = (1 if self.epi == EPI_ACT else 2) * t.block_n
        if fp8 is None:
            copies += wgmma and t.num_stages > 1
            return t.block_k * copies * (a_rows + w_rows) * itemsize
        if fp8.activations == "fp8" and a_absmax:  # A from a '-qs' GEMM: bf16 in, e4m3 out
            if t.num_stages == 1:
                return t.block_k * t.block_n
            quantised_a = block_m if wgmma and t.swap else 0
            return (t.block_k * (copies * 2 * a_rows + (copies + wgmma) * w_rows + quantised_a)
                    + 4 * copies * a_rows)
        if fp8.activations == "fp8" and t.preq:  # A quantised before: all e4m3, as bf16's rule
            return t.block_k * (copies + (wgmma and t.num_stages > 1)) * (a_rows + w_rows)
        if fp8.activations == "fp8":  # w8a8, A quantised in the main loop
            quantised_a = block_m * (1 if wgmma else 2)
            return t.block_k * (copies * 2 * a_rows + quantised_a + (copies + wgmma) * w_rows)
        widened = 2 * t.block_n if wgmma and not t.swap else 0  # wgmma's B, e4m3 -> bf16
        return t.block_k * ((copies + wgmma) * 2 * a_rows + copies * w_rows + widened)

    def on(self, tile: TileConfig, **sizes) -> "GemmSpec":
        """This GEMM on `tile`, with the fields a layer knows only from its weights' shapes
        (`sizes`: n_dept, per_group, a_up_off, c_up_off; or its operator: act)."""
        return dataclasses.replace(self, tile=tile, **sizes)


def shared_memory_limit(device) -> int | None:
    """The most shared memory one program may use on `device` (bytes), the limit Triton checks a
    compiled kernel against (its driver's max_shared_mem; else torch's opt-in maximum per
    block); None off CUDA."""
    device = torch.device(device)
    if device.type != "cuda" or not torch.cuda.is_available():
        return None
    index = device.index if device.index is not None else torch.cuda.current_device()
    try:
        from triton.runtime import driver

        return int(driver.active.utils.get_device_properties(index)["max_shared_mem"])
    except (ImportError, AttributeError, KeyError, RuntimeError):
        props = torch.cuda.get_device_properties(index)
        return getattr(props, "shared_memory_per_block_optin", None)
