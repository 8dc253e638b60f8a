"""The local, read-only web console (``rensei ui``): HTML pages over one home, served by
waitress on loopback. An adapter like ``control/``: it reads the store through read-only
connections (the shadow index, the chain, policy revisions), reuses the services' readers
(``ops.doctor``, ``host.status``, ``shadow.whatif``) and the core's aggregations and text, and
never imports the CLI. No route writes anything; every asset ships inside the package.
"""
