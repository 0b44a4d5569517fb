"""The book's notebooks (notebooks/<name>.ipynb), by the number the runner and `make chapter N=` use."""

# the chapters: each computes and writes results/<name>.json
NOTEBOOKS = {"01": "01_cache_exactness", "02": "02_bert_contrast", "03": "03_sense_probes",
             "04": "04_cache_approximations", "05": "05_qwen3_switch"}
# the pages that summarise the chapters' results files; their only parameter is results_dir
PAGES = {"06": "06_conclusions", "A": "appendix_a_reproducibility", "B": "appendix_b_performance"}
