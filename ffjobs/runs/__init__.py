"""Runs: one key and one owner for everything of a pipeline run, and the stage contract."""
