#!/usr/bin/env bash
# Second H200 training measurement (after train_h200.sh): one micro-step per step, fused AdamW,
# routing statistics once per step; then torch.profiler of a step of each architecture.
set -u
export PYTHONPATH=src PYTHONUNBUFFERED=1 TQDM_MININTERVAL=30
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
CFG=workflow/profiles/gpu/train-sections.yaml
D=results/data-gpu
R=/tmp/runs2
OUT=${OUT:-/tmp/out}
T=${T:-45}
mkdir -p $R $OUT/m2
CUDA_VISIBLE_DEVICES=0 python3 -m deamoe train --config $CFG --run pretrain-baseline --data $D \
  --out $R/baseline --max-seconds $T > $OUT/b2.log 2>&1 &
CUDA_VISIBLE_DEVICES=1 python3 -m deamoe train --config $CFG --run pretrain-deamoe --data $D \
  --out $R/deamoe --max-seconds $T > $OUT/d2.log 2>&1 &
wait
tail -n 3 $OUT/b2.log $OUT/d2.log
CUDA_VISIBLE_DEVICES=0 python3 -m deamoe.train.profile_step $CFG pretrain-baseline $D \
  $OUT/train_profile_baseline.csv > $OUT/pb.log 2>&1 &
CUDA_VISIBLE_DEVICES=1 python3 -m deamoe.train.profile_step $CFG pretrain-deamoe $D \
  $OUT/train_profile_deamoe.csv > $OUT/pd.log 2>&1 &
wait
cat $OUT/pb.log $OUT/pd.log
python3 -m deamoe.train.measure $R $OUT/m2
rm -f $OUT/b2.log $OUT/d2.log
