#!/bin/bash
# Full-context guidance (train.guided_alignment.full_context, Garg et al. 2019) against causal
# guidance, like for like: both continue the unguided en->fr Transformer of seed 3 for 800 updates
# with the same guide (eflomal's links), the 447 Hansards pairs read 10 times an epoch, a constant
# learning rate of 1e-3; only full_context differs. Judged without gold (agreement with the guide
# on the 447 pairs, greedy validation BLEU); the gold AER is measured once, after.
cd /work/main
export H=/work/shared/data/alignment/hansards_en_fr M=/work/shared/data/multi30k
export NMT_HANSARDS_DIR=$H NMT_MULTI30K_DIR=$M
R=runs/fair/full_context; mkdir -p $R runs/logs
for FC in false true; do
  python -m nmt.train experiment=hansards_fair_en_fr_transformer \
    train.init_from=runs/fair/fair_en_fr_transformer_seed3/checkpoints/best.pt \
    train.guided_alignment.path=runs/fair/links/en-fr.links train.guided_alignment.full_context=$FC \
    data.extra_train.repeat=10 train/scheduler=constant '~train.scheduler.warmup_steps' train.optimizer.lr=1e-3 \
    train.max_steps=800 train.eval_every=200 train.threads=1 train.resume=auto \
    hydra.run.dir=$R/en_fr_fc_$FC > runs/logs/full_context_$FC.out 2>&1 &
done
wait
for FC in false true; do
  python -m nmt.align ckpt=$R/en_fr_fc_$FC/checkpoints/best.pt pairs=$H/en-fr.src-tgt align.full_context=$FC \
    threads=1 output=$R/en_fr_fc_$FC.links > /dev/null 2>&1
  python docs/lab/records/fair/agreement.py $R/en_fr_fc_$FC.links runs/fair/links/en-fr.links >> $R/agreement.txt
done
echo finished; date
