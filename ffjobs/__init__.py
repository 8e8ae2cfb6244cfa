"""ffjobs: face-fusion training on SLURM GPU clusters, orchestrated by Airflow and tracked in MLflow.

Importing ffjobs needs only the standard library, PyYAML and (for training code) torch:
Airflow, MLflow, boto3 and submitit are imported where they are used.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("ffjobs")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+source"
