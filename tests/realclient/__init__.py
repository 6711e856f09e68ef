"""Driving real agent CLIs against a local mock model server."""
