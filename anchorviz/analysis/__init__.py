"""Stage 4, analysis: hidden-state capture, drift (CKA / cosine), the shared projection, the
metrics (accuracy, WRG / PGR, intervals) and the across-seed summaries."""

__all__: list[str] = []
