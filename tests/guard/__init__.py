"""Tests of gitrun/guard/."""
