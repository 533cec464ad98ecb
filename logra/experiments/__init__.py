"""One module per notebook: `config(scale, **overrides)`, `run(config) -> DataFrame`, plots."""
