"""core: what every layer above uses, with no model in it (torch only where a check needs it).

article      the published study's figures, the reference column of every chapter
checkpoints  a long job's units stored as they finish, so an interrupted build resumes mid-chapter
catalog      the book's notebooks by number: the five chapters and the three summary pages
checks       checks of one parameter value, each error naming the parameter and what is allowed
compare      the paired comparison behind every "beats", "best" and "from depth k on" on a page
data         the study's data: ambiguous words, garden paths, the document corpus (bounded reads)
hooks        forward hooks as context managers that always remove themselves
interrupt    Ctrl-C and SIGTERM for the command lines: one line, exit status 130
params       a notebook's first cell: papermill's names checked, the run's results folder
schema       the results files' formats (schemas/, one JSON Schema per file) and the check
paths        the repository checkout the package sits in (or KVUTILS_REPO)
records      the one loader of the results files: each read, checked against its format, typed
results      one results file per chapter run, written as one unit, and its figures
results_diff every number of two results folders compared (the proof that a refactor changed no result)
"""
