"""ffjobs: face-fusion training on SLURM GPU clusters, orchestrated by Airflow and tracked in MLflow.

Importing ffjobs needs only the standard library, PyYAML and (for training code) torch:
Airflow, MLflow, boto3 and submitit are imported where they are used.
"""

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

try:
    __version__ = version("ffjobs")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+source"
