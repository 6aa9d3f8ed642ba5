"""LLM protocol gateway: an aiohttp reverse proxy that translates between inference wire dialects."""

__version__ = "0.1.0"
