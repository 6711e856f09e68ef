"""gitrun: a git-native, resumable run manager for large fan-outs of workers."""

__version__ = "0.1.0"
