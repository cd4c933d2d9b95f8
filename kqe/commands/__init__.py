"""Click commands kept out of `kqe/cli.py` and registered there with `main.add_command`."""
