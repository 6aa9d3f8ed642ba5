"""The status page at /ui/: routes, backends and replicas, and each route's last minute, drawn by
the page's own script from a JSON document it asks for every second (docs/operations.md, The status page)."""
