"""How good a face-swap model is, measured: the held-out evaluation set, the recogniser that
measures identity (not the training loss's), the metrics and their intervals against chance.

Below :mod:`ffjobs.train` and :mod:`ffjobs.evaluate`: the trainer measures with it during
training (``evaluate.every_steps``), the evaluate stage at the end, the same way."""
