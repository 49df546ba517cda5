"""odradek's tools, one module per Kafka tool; each exposes ``add_parser(subcommands)`` and ends
through ``command.run_tool`` (the one ``ToolError`` and error wrapper)."""
