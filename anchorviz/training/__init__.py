"""Stage 3, training: the losses (Bradley-Terry, confidence, ANCHOR), the frozen reference, the
one training loop, the SEAM label-refinement baseline and experiment tracking."""

__all__: list[str] = []
