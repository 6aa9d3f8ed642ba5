"""The neutral form every request passes through, the error tree, and the exchange pipeline."""
