"""Reports from results: read rows (``results``), compute figures (``summary``: rows grouped, ``groups``;
their ``statistics``; publishers and consumers joined, ``flows``; the picks, ``recommend``), lay them out
(``render``: the report's tables, drawn by ``table`` for the terminal, Markdown and HTML, and CSV;
``plots`` for the HTML page and PNG).

    from wirepipe.study.report import load_results, summarize
    res = load_results(["results/"])
    report = summarize(res.stages, res.latency, res.runs, bandwidth_bps=100e6)

``summarize`` takes any Arrow table with the stage-row columns (plus optional ``label``
and ``dataset`` columns to group rows by configuration), so a benchmark can hand it
rows it recorded itself (``MetricsRecorder(None)`` keeps them in memory).
"""

from .results import Results, RunInfo, load_results
from .summary import Report, summarize

__all__ = ["Report", "Results", "RunInfo", "load_results", "summarize"]
