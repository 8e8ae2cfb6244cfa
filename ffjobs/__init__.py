"""ffjobs: face-fusion training on SLURM GPU clusters, orchestrated by Airflow and tracked in MLflow.

Importing ffjobs needs only the standard library, PyYAML and (for training code) torch:
Airflow, MLflow, boto3 and submitit are imported where they are used.
"""

import atexit
import gc
from importlib.metadata import PackageNotFoundError, version

# Each ffjobs process imports torch (often Dynamo and MLflow too): several hundred thousand
# objects that live as long as the process. At Python's default thresholds the collector walks
# all of them again and again while they are being made, in full collections that free almost
# nothing. Full collections ten times rarer; the young generations, which free the short-lived
# cycles, are collected as often as before. A threshold set higher already is kept.
_young, _middle, _full = gc.get_threshold()
gc.set_threshold(_young, _middle, max(_full, 100))
del _young, _middle, _full

# At exit the interpreter collects once more, over every object still alive: for a process that
# imported torch, Dynamo and MLflow about a second of CPU, the same again as the imports took,
# to find next to no garbage. Once the exit handlers registered after this one have run, every
# object left is moved out of the collector's sight: memory goes back to the system with the
# process, as it does for what reference counts do not free.
atexit.register(gc.freeze)

try:
    __version__ = version("ffjobs")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+source"
