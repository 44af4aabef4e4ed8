"""The `cascade` command line: a thin layer over the packages (entry point: `cli.main`)."""
