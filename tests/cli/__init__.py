"""Tests of gitrun/cli/."""
