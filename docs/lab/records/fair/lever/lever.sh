#!/bin/bash
# data.extra_train.repeat=K as a fine-tuning lever: continue each guided Transformer for 800 updates
# with the 447 Hansards pairs read K times an epoch (no gold involved); K is then chosen by agreement
# with the guide on the 447 pairs and by validation BLEU.  usage: lever.sh K
K=$1
cd /work/main
export H=/work/shared/data/alignment/hansards_en_fr M=/work/shared/data/multi30k NMT_HANSARDS_DIR=/work/shared/data/alignment/hansards_en_fr NMT_MULTI30K_DIR=/work/shared/data/multi30k
for p in "en_fr en-fr" "fr_en fr-en"; do set -- $p
  python -m nmt.train experiment=hansards_fair_$1_transformer train.init_from=runs/fair/fair_$1_transformer_guided/checkpoints/best.pt \
    train.guided_alignment.path=runs/fair/links/$2.links data.extra_train.repeat=$K train/scheduler=constant "~train.scheduler.warmup_steps" train.optimizer.lr=1e-3 \
    train.max_steps=800 train.eval_every=200 train.threads=1 train.resume=auto hydra.run.dir=runs/fair/lever/$1_K$K > runs/logs/lever_$1_K$K.out 2>&1 &
done
wait
A=runs/fair/lever/aer; mkdir -p $A
python -m nmt.align ckpt=runs/fair/lever/en_fr_K$K/checkpoints/best.pt pairs=$H/en-fr.src-tgt threads=1 output=$A/en_fr_K$K.links > /dev/null 2>&1 &
python -m nmt.align ckpt=runs/fair/lever/fr_en_K$K/checkpoints/best.pt pairs=runs/fair/fr-en.src-tgt threads=1 output=$A/fr_en_K$K.links > /dev/null 2>&1
wait
python docs/lab/records/fair/agreement.py $A/en_fr_K$K.links runs/fair/links/en-fr.links > $A/agreement_K$K.txt
python docs/lab/records/fair/agreement.py $A/fr_en_K$K.links runs/fair/links/fr-en.links >> $A/agreement_K$K.txt
echo finished K=$K; date
