"""Execution helpers (RLlib 1.11's ``ray.rllib.execution``): the TF multi-GPU tower stack."""
