"""Pre-checks run on user inputs before an experiment (RLlib's ``utils.pre_checks``)."""
