"""The proxy runtime: routes, the plan of each request, the engine that carries it out, the
exchange handler that serves clients, and the observation of it all."""
