"""Code that reaches into framework internals, each entry behind a guard with a plain twin."""
