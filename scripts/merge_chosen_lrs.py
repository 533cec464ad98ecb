"""Put a partial sweep's chosen learning rates into the committed tables.

After a change to some optimizers' code, sweep just them (notebook 10's `only` parameter):

    logra-repro reproduce --pin avx2 --scale sweep --only 10_training_quality \\
        -p 'only=["logra-channel"]'
    python scripts/merge_chosen_lrs.py results/sweep/figures figures

Their rows of figures/training_quality*_{sweep,ranks}.csv are replaced, every other row kept
(`logra.experiments.training_quality.merge_chosen`); the default scale then reads them.
"""

import argparse
from pathlib import Path

from logra.experiments.training_quality import merge_chosen

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", type=Path, help="the partial sweep's figures directory")
    parser.add_argument("target", type=Path, help="the tables to update (figures/)")
    args = parser.parse_args()
    for path in merge_chosen(args.source, args.target):
        print(f"updated {path}")
