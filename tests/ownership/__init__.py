"""Tests of gitrun/ownership/."""
