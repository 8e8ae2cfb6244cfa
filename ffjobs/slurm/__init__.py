"""SLURM access: submit and follow jobs (executor, job state, accounting), classify how they
ended (failures, signatures), retry them (supervisor), name nodes. Nothing here knows training:
the training job is :mod:`ffjobs.train.slurm_job`."""
