"""The data layer: reading text (plain, gzipped, stdin), the corpora (Multi30k, files, Hugging Face
datasets, the synthetic task), subword vocabularies and token batches. It imports only the model
core's base modules (tokens, vocab, errors, files, runtime).
"""
