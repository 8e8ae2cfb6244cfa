"""Runs: one key and one owner for everything of a pipeline run, and the stage contract.

A layer of records, below the stages: ``data``, ``train``, ``preflight``, ``evaluate`` and
``registry`` each write their outcome into a :class:`~ffjobs.runs.run.Run`, so nothing here
imports them (:mod:`ffjobs.runs.stages` reaches each stage function by name). What needs the
stages or the checkpoint store sits above: ``ffjobs run`` (:mod:`ffjobs.pipeline`),
``ffjobs runs list/show`` (:mod:`ffjobs.commands_runs`), and the step a resume continues from
(:func:`ffjobs.train.checkpoint.latest_step`, handed to :func:`~ffjobs.runs.run.resume_run`).
"""
