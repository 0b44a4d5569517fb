"""The explorer layer: chapter 3's attention explorer, where one query token of a causal model looks
in two contexts side by side. It loads models (`models`), builds its texts with chapter 3's
constructions (`studies.sense_probes`) and shows its offline view as a `report.interactive` chart.

    data         the attention maps and the selected view both faces share, and the book's recording of
                 every model, word pair, layer and head, packed as 8-bit weights
    widgets      the live ipywidgets panel for Jupyter (`AttentionExplorer`)
    html         the offline view in the page: controls, one Plotly figure and the packed data
(`explorer_view`)
    explorer.js  the page's script: unpacks the data in the browser and redraws on every control
"""
