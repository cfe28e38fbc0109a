"""PyTorch models and action distributions (imports torch only when a submodule is used)."""
