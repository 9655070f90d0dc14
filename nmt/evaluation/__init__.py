"""The evaluation layer: corpus metrics, BLEU by sentence length with significance, the evaluation
report and attention statistics. Used by training (validation) and by ``nmt.evaluate``.
"""
