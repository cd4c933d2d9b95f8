"""The floor every stage stands on: records, io, errors, workspace, model registry and store, sources."""
