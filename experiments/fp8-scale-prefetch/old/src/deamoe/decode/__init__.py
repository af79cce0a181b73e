"""One MoE / DeaMoE layer's decode step on the Triton kernels: what the server runs and the
benchmarks time.

  weights.py        the step's weights by name (the layout of deamoe.model.layers), a trained
                    layer's tensors under those names, random ones for the benchmarks
  step.py           router GEMM -> routing (the single-launch Triton kernel on CUDA) -> the
                    layer's kernels (deamoe.kernels) -> the shared experts, if any
  knobs.py          the tile choices of a step as {knob: value} and as text (microbench.csv)
  picks.py          the tiles a microbenchmark table picked per layer shape and batch; the
                    committed H200 picks ship as tile_picks.json

deamoe.serve.ffn_op runs `ffn_step` with the packaged picks inside vLLM's CUDA graphs;
deamoe.bench searches the knobs and times `ffn_step` (per layer and inside a whole decoder).
Nothing here imports deamoe.bench, deamoe.serve or vLLM.
"""
