"""The neutral form every request, answer and stream event passes through, whatever its dialect."""
