"""Airflow glue: the pipeline's task bodies (and, later, the SLURM operator and its trigger).

Modules here may import Airflow at module level, but never torch, numpy, PIL or MLflow: the
DAG processor imports them on every parse.
"""
