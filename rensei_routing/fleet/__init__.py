"""Fleet evidence in one place: hosts' audit exports verified and ingested into PostgreSQL
(:mod:`.ingest`), hosts' keys trusted centrally (:mod:`.trust`), and the fleet report computed
in SQL (:mod:`.report`). A service: imports the core, the store's note reader and the leaves;
never the CLI, the control side or the host side. psycopg is imported only when a fleet
function runs (the ``postgres`` extra)."""
