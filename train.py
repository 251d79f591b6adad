"""Train a query augmenter: ``python train.py --dataset scifact [--output-dir DIR] [--resume]``."""

import sys

from bm25aug.cli import main

if __name__ == "__main__":
    sys.exit(main(["train", *sys.argv[1:]]))
