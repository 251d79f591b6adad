"""Evaluation: metrics, and the one function that runs a method on a dataset split."""
