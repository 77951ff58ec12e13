"""One record type per run-directory file, each with to_json / from_json and a schema version."""
