"""What every command line shares: composing the overrides and refusing a mistake in one line, exit 2
(:mod:`.command_line`, :mod:`.cli_args`), and the quiet console that keeps ifdistill's own lines
(:mod:`.console`)."""
