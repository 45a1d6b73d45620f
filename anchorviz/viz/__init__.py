"""Stage 6, the views: plotly figures of stored results, the JupyterLab explorers and the HTML
report."""

__all__: list[str] = []
