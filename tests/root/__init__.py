"""Tests of the package's root modules (gitrun/*.py)."""
