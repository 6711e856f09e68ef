"""Tests of gitrun/store/."""
