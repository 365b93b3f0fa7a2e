"""A sim plugin that makes each session worker start slowly: it sleeps, at
import, the seconds written in the file named by RCUDA_TEST_WORKER_DELAY
(tests/test_load.py uses it to queue hellos behind slow workers)."""
import os
import time

_delay_file = os.environ.get("RCUDA_TEST_WORKER_DELAY")
if _delay_file and os.path.exists(_delay_file):
    time.sleep(float(open(_delay_file).read().strip() or 0))

KERNELS = {}
