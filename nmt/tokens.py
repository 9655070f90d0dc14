"""The four special token ids every vocabulary of this package has (:mod:`nmt.vocab` makes the
sentencepiece models so), and which the model, batching and search rely on::

    PAD_ID = 0   padding, never produced by the model (its logit is masked in search)
    UNK_ID = 1   unknown piece (also what word dropout reads a dropped word as)
    BOS_ID = 2   start of a target sentence (decoder input at step 1)
    EOS_ID = 3   end of a sentence (appended to sources and targets)

Every real subword id is above ``EOS_ID``.
"""

PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3
