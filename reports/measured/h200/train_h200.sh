#!/usr/bin/env bash
# The H200 training measurement behind reports/measured/h200/train_*.csv (run through the device
# tool on a 2 x H200 machine, working tree + carried results/data-gpu shards).
#   A: pretrain-baseline (GPU 0) and pretrain-deamoe (GPU 1) side by side, gpu profile,
#      time-boxed to T seconds each: tokens/s, MFU, loss curve.
#   B: pretrain-deamoe for 40 steps on one GPU, then on two GPUs with torchrun + FSDP2
#      (same global batches): loss curves compared step by step.
set -u
export PYTHONPATH=src PYTHONUNBUFFERED=1 TQDM_MININTERVAL=30
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
CFG=workflow/profiles/gpu/train-sections.yaml
D=results/data-gpu
R=/tmp/runs
OUT=${OUT:-/tmp/out}
T=${T:-150}
mkdir -p $R $OUT
nvidia-smi -L; python3 -c "import torch; print(torch.__version__, torch.cuda.device_count())"
CUDA_VISIBLE_DEVICES=0 python3 -m deamoe train --config $CFG --run pretrain-baseline --data $D \
  --out $R/baseline --max-seconds $T > $OUT/baseline.log 2>&1 &
CUDA_VISIBLE_DEVICES=1 python3 -m deamoe train --config $CFG --run pretrain-deamoe --data $D \
  --out $R/deamoe --max-seconds $T > $OUT/deamoe.log 2>&1 &
wait
tail -3 $OUT/baseline.log $OUT/deamoe.log
{
  CUDA_VISIBLE_DEVICES=0 python3 -m deamoe train --config $CFG --run pretrain-deamoe --data $D \
    --out $R/one40 --steps 40
  sed 's/nproc_per_node: 1/nproc_per_node: 2/' $CFG > /tmp/fsdp2.yaml
  python3 -m deamoe train --config /tmp/fsdp2.yaml --run pretrain-deamoe --data $D --out $R/two40 --steps 40
} > $OUT/fsdp.log 2>&1
tail -5 $OUT/fsdp.log
python3 -m deamoe.train.measure $R $OUT
python3 -c "import json,glob,sys; json.dump({p.split('/')[-2]: json.load(open(p)) for p in glob.glob('$R/*/summary.json')}, open('$OUT/summaries.json','w'), indent=1)"
ls -la $OUT
