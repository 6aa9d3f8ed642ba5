"""Simulated inference servers: each dialect's own inbound codec in front of a fake model."""
