"""vLLM's own fused-MoE kernel timed beside our baseline on the same GPU (NOTES.md v44).

usage: python scripts/h200_vllm_peer.py {extract,check,run} ...   (see deamoe.bench.vllm_peer)
  extract   where vLLM is installed: copy its kernel verbatim to .peer/vllm_fused_moe.py
  check     the peer path against a reference (CPU interpreter or GPU)
  run       CUDA: OUT_DIR MODEL:BATCH ... -> OUT_DIR/vllm_peer.csv
"""

import sys

from deamoe.bench.vllm_peer import main

if __name__ == "__main__":
    sys.exit(main())
