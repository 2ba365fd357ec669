"""The launchers the CLI runs: ``courier up``'s supervisor, its worker pool and
Procfile, the embedded store, Flower, backups and health checks."""
