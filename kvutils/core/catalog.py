"""The book's notebooks (notebooks/<name>.ipynb), by the number the runner and `make chapter N=` use."""

# the chapters: each computes and writes results/<name>.json
NOTEBOOKS = {"01": "01_cache_exactness", "02": "02_bert_contrast", "03": "03_sense_probes",
             "04": "04_cache_approximations", "05": "05_qwen3_switch"}
# the pages that summarise the chapters' results files; their only parameter is results_dir
PAGES = {"06": "06_conclusions", "A": "appendix_a_reproducibility", "B": "appendix_b_performance"}


def main(argv: list[str] | None = None) -> int:
    """`python -m kvutils.core.catalog N`: exit 2 with one line unless N is a chapter (make chapter's N)."""
    import sys

    given = (argv if argv is not None else sys.argv[1:])[:1] or [""]
    if given[0] in NOTEBOOKS:
        return 0
    *others, last = NOTEBOOKS
    print(f"make chapter: N={given[0]} is not a chapter; give N={', '.join(others)} or {last} "
          '(and PARAMS="-p name value ...")', file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
