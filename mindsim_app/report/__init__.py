"""The run report, so a run's results read on one page: one self-contained HTML file per run or per comparison of runs.

Modules, one per concern: `load` (the run folder's paths and readers), `ranking` (leaderboard and
significance clusters), `drilldown` (sessions as chats with their judgments), `health` (simulator health
and failure attribution), `versions` (the versions block and the comparison rule), `charts` (inline SVG),
`build` (the page; its Jinja template, script and style are in `templates/`), `cli` (the command).
"""
