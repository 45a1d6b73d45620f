"""Stage 5, the pipeline: the content-hashed run store, data preparation, the steps of one run
(teacher, students, capture), sweeps, the run graph and its executor, the results table, and
the analysis of a reward model trained elsewhere."""

__all__: list[str] = []
