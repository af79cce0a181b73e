"""Per-GEMM breakdown of one decode step (sibling benchmark of fused_moe.py / deamoe_decode.py).

Each stage's launch is captured alone in a CUDA graph and timed (median of replays); its bytes
are the weights of the groups (experts or departments) this routing uses.  Tells which GEMM of
a layer falls short of the read roofline.  CUDA only.
"""

from __future__ import annotations

import torch


def _used(ids: torch.Tensor, per_group: int) -> int:
    return int(torch.unique(ids // per_group).numel())


def stage_times(stages, ids: torch.Tensor, per_group: dict[str, int], reps: int = 30,
                only: set[str] | None = None) -> list[dict]:
    """Rows {stage, us, bytes, tbps}; `stages` from fused_moe_stages / deamoe_stages (all run
    once first, so every stage reads real data; then each stage in `only`, default all, timed)."""
    import triton.testing

    for _, launch, _ in stages:  # align + fill intermediates so every stage reads real data
        launch()
    torch.cuda.synchronize()
    rows = []
    for name, launch, tensors in stages:
        if only is not None and name not in only:
            continue
        ms = triton.testing.do_bench_cudagraph(launch, rep=max(20, reps), return_mode="median")
        nbytes = 0
        if tensors:
            used = _used(ids, per_group[name])
            nbytes = used * sum(t[0].numel() * t.element_size() for t in tensors)
        rows.append({"stage": name, "us": ms * 1e3, "bytes": nbytes,
                     "tbps": nbytes / (ms * 1e-3) / 1e12 if nbytes else float("nan")})
    return rows


def dept_gemm_inputs(shape, router: torch.Tensor, tokens: int) -> dict:
    """What the department GEMMs of a DeaMoE `shape` read when timed alone at `tokens` (the
    department-tile scripts, NOTES.md v15 / v17): x (seeded by the token count), its routing
    `ids` through `router`, the number of departments it uses, and the a1 / fp32 S / fp32
    output buffers of the layer."""
    from deamoe.routing import route

    n, f, dev = shape.n_dept, shape.h_ffn, router.device
    torch.manual_seed(tokens)
    x = torch.randn(tokens, shape.h, device=dev, dtype=torch.bfloat16)
    ids, _ = route(shape, torch.nn.functional.linear(x, router))
    return dict(x=x, ids=ids, depts=int(torch.unique(ids // shape.experts_per_dept).numel()),
                a1=torch.empty(tokens * n, 2 * f, device=dev, dtype=torch.bfloat16),
                out_acc=torch.zeros(tokens, shape.h, device=dev, dtype=torch.float32),
                s32=torch.randn(tokens * n, f, device=dev, dtype=torch.float32))


def rotated_us(launch, copies: int, rep_ms: int = 30) -> float:
    """Microseconds per launch of `launch(i)`, i = 0..copies-1 (one launch per weight copy, so
    the copies rotate beyond L2), all in one CUDA graph; median of the replays."""
    import triton.testing

    def run():
        for i in range(copies):
            launch(i)
    return triton.testing.do_bench_cudagraph(run, rep=rep_ms, return_mode="median") * 1e3 / copies


def dense_dept_up_us(bench, d: dict, ws: list[dict], shape, block_m: int, tile_name: str):
    """Microseconds of the dense department gate/up GEMM (every token in every department, as
    `dense_dept_up` runs it) on the inputs `d` of `dept_gemm_inputs` and the weight copies `ws`,
    timed by `bench(launch)` (e.g. `rotated_us`); None (and a printed line) for a tile that does
    not fit the GPU."""
    from deamoe.kernels.align import dense_alignment
    from deamoe.kernels.deamoe_decode import dept_up_gemm
    from deamoe.kernels.grouped_gemm import TileConfig

    per = shape.experts_per_dept
    tokens = d["x"].shape[0]
    al, every = dense_alignment(tokens, shape.n_dept, per, block_m, d["x"].device)
    tile = TileConfig.parse(tile_name)
    try:
        return bench(lambda i: dept_up_gemm(d["x"], ws[i]["dept_gate"], ws[i]["dept_up"],
                                            d["a1"], al, every, per, tile))
    except Exception as exc:  # noqa: BLE001 - a tile that does not fit is skipped
        print("dept_up", tokens, block_m, tile_name, type(exc).__name__,
              str(exc).splitlines()[0][:100])
        return None
