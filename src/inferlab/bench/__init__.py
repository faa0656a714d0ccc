"""The lab: plans of benchmark cells, each run in its own process, written as result rows and read back
into reports, comparisons and recommendations.

Layout: knobs.py (typed settings) -> cells.py (one configuration) -> plan.py / plan_presets.py (what to
run) -> launcher.py + cell_main.py (isolation) -> scenarios/ and backends/ (what a cell measures) ->
results.py, report.py, plots.py, findings.py, compare.py, recommend.py (what is read from the rows).
docs/lab.md describes the interface that new scenarios and backends plug into.
"""
