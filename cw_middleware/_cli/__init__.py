"""The ``cw-middleware`` command (also ``python -m cw_middleware``).

main.py           the parser and each subcommand: estimate, demo, runs, stages, show,
                  statusline, summary, serve
reading.py        what the read commands share: the reader, exit codes and messages, file backend notes
demo.py           a short mocked agent conversation through the wrapper, for the first run
render.py         a breakdown in the terminal, in the spirit of Claude Code's /context
render_usage.py   beyond the categories: tools, unused definitions, cost, cache, history
statusline.py     one line for status bars: a stage's window at a glance
"""
