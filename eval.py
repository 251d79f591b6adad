"""Evaluate: ``python eval.py --dataset scifact --method augmented|bm25-wp|bm25-flat`` or
``python eval.py --transfer triviaqa [--checkpoint DIR]``."""

import sys

from bm25aug.cli import main

if __name__ == "__main__":
    sys.exit(main(["eval", *sys.argv[1:]]))
