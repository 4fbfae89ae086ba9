"""Seeds of the detector benchmark (bench/detect.py), committed so results can be reproduced.

The detector's thresholds are tuned on TUNING_SEEDS only (`python -m bench.detect --tuning`);
the published table is scored on SCORING_SEEDS, which are never used for tuning.
"""
TUNING_SEEDS = (7001, 7002, 7003)
SCORING_SEEDS = (1, 2)
