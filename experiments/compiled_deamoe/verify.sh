#!/usr/bin/env bash
# On one GPU (the device tool, carry [".whl"]): the product code's compiled DeaMoE path against
# the stuck-run fault, then the training benchmark.  Writes $OUT/verify.log and
# $OUT/train_throughput.csv.  About 8 minutes.
set -uo pipefail
: "${OUT:?}" "${DEAMOE_GIT_SHA:?}"
pip install -q --no-index --no-deps --target /tmp/pt .whl/pytest-*.whl .whl/pluggy-*.whl .whl/iniconfig-*.whl >/dev/null 2>&1
export PYTHONPATH=$PWD/src:/tmp/pt
{
  echo "== GPU tests (fast path, grouped)"
  timeout 240 python -m pytest -q -s -p no:logging -m gpu tests/model/test_fast_ffn.py tests/model/test_grouped.py 2>&1 | grep -E "fast|passed|failed|Error" | grep -v Warning
  echo "== stuck runs, product code"
  timeout 90 env PYTHONPATH="$PYTHONPATH:tests/model:experiments/compiled_deamoe" python -c '
from escape import finals
f = finals("deamoe", "fast", True, 3e-3)
print(f"deamoe fast compiled lr 3e-3: {[round(x, 3) for x in f]}, stuck {sum(x > 2 for x in f)}/6")'
  echo "== small repro of the fault (traced index math), no training"
  timeout 150 python experiments/compiled_deamoe/gpu_repro.py
  echo "== the token combine alone (deamoe.model.gather_sum)"
  timeout 120 python experiments/gather_sum/bench.py
} 2>&1 | grep -v -i warn | tee "$OUT/verify.log"
timeout 250 python -m deamoe bench train "$OUT" --parts layer,step --paths torch,fast,fast+compile --steps 8 2>&1 | tail -8
