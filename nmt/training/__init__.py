"""The training layer: the trainer and its schedules, moving average and data-parallel helpers, the
start-up checks of a training config, and the reader of run folders. Used by ``nmt.train``.
"""
