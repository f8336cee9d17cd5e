"""How the local cluster's components talk to the API server: a JSON client, list-then-watch caches and
an Event recorder (the roles client-go's REST client, informers and recorder play for Go components)."""
