"""Tests of gitrun/processes/."""
