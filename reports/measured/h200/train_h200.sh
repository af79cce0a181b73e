#!/usr/bin/env bash
# The H200 training measurements behind reports/measured/h200/train_*.csv, run through the device
# tool on a 2 x H200 machine (working tree + the carried results/data-gpu shards).
#   train_h200.sh          (train_gpu.csv, train_curves.csv, train_fsdp.csv, train_summaries.json)
#     A: pretrain-baseline (GPU 0) and pretrain-deamoe (GPU 1) side by side, gpu profile,
#        time-boxed to T=150 seconds each: tokens/s, MFU, loss curve.
#     B: pretrain-deamoe for 40 steps on one GPU, then on two GPUs with torchrun + FSDP2
#        (same global batches): loss curves compared step by step.
#   train_h200.sh profile  (train_gpu_opt.csv, train_curves_opt.csv, train_profile_*.csv; after
#        one micro-step per step, fused AdamW, routing statistics once per step)
#     A for T=45 seconds, then torch.profiler of one step of each architecture.
set -u
export PYTHONPATH=src PYTHONUNBUFFERED=1 TQDM_MININTERVAL=30
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
CFG=workflow/profiles/gpu/train-sections.yaml
D=results/data-gpu
OUT=${OUT:-/tmp/out}
MODE=${1:-throughput}

side_by_side() {  # runs folder, seconds, log prefix: the pair trained at once, one GPU each
    CUDA_VISIBLE_DEVICES=0 python3 -m deamoe train --config $CFG --run pretrain-baseline --data $D \
      --out $1/baseline --max-seconds $2 > $OUT/$3baseline.log 2>&1 &
    CUDA_VISIBLE_DEVICES=1 python3 -m deamoe train --config $CFG --run pretrain-deamoe --data $D \
      --out $1/deamoe --max-seconds $2 > $OUT/$3deamoe.log 2>&1 &
    wait
    tail -n 3 $OUT/$3baseline.log $OUT/$3deamoe.log
}

if [ "$MODE" = profile ]; then
    R=/tmp/runs2
    mkdir -p $R $OUT/m2
    side_by_side $R "${T:-45}" 2-
    CUDA_VISIBLE_DEVICES=0 python3 -m deamoe.commands.profile_step $CFG pretrain-baseline $D \
      $OUT/train_profile_baseline.csv > $OUT/pb.log 2>&1 &
    CUDA_VISIBLE_DEVICES=1 python3 -m deamoe.commands.profile_step $CFG pretrain-deamoe $D \
      $OUT/train_profile_deamoe.csv > $OUT/pd.log 2>&1 &
    wait
    cat $OUT/pb.log $OUT/pd.log
    python3 -m deamoe.train.measure $R $OUT/m2
    rm -f $OUT/2-baseline.log $OUT/2-deamoe.log
    exit
fi
R=/tmp/runs
mkdir -p $R $OUT
nvidia-smi -L; python3 -c "import torch; print(torch.__version__, torch.cuda.device_count())"
side_by_side $R "${T:-150}" ""
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
