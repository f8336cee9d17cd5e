"""How migdra's API clients watch and write: a JSON client, list-then-watch caches, an Event recorder
and a control loop (the roles client-go's REST client, informers, recorder and controller loop play for
Go components).

Used by the reservation controller (:mod:`dra_driver.controller`) and by the development cluster's
components (package ``migdra-devcluster``), which it never imports.
"""
