"""Framework-neutral internals of rlpolicy. Never imports torch or tensorflow at module level."""
