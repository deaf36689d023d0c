"""The subcommands of `oespec`, one module each."""
