"""A stand-in for the build child (`python -m tests.fake_build_child JOB`): tqdm-style layer frames as
llmcompressor's sequential pipeline writes them, a second apart, then exit 0."""

import sys
import time

for group in range(1, 4):
    sys.stderr.write(f"\r({group}/3): Calibrating:  50%|#####     | 32/64 [00:01<00:01]")
    sys.stderr.flush()
    time.sleep(1.3)
sys.stderr.write("\n")
