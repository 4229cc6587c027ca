"""One module per command; each exposes NAME, HELP, NEEDS_ARGS and `command`."""
